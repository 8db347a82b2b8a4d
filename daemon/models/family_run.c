/* family_run.c — the daemon's table of model families (family_run.h). */
#include "models/family_run.h"

extern const wf_family_run_t wf_flux_family_run;
extern const wf_family_run_t wf_wan_family_run;

/* Every family this daemon runs. A new family adds its line here and in
 * modelfiles/family.c. */
static const wf_family_run_t *const runs[] = {
    &wf_flux_family_run,
    &wf_wan_family_run,
};

const wf_family_run_t *wf_family_run_of(const wf_family_t *fam)
{
    for (size_t i = 0; fam && i < sizeof runs / sizeof runs[0]; i++)
        if (runs[i]->fam == fam)
            return runs[i];
    return NULL;
}

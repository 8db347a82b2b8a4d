/* test_mesh.c — unit test of mesh.c: rank <-> coordinates, group members
 * against hand-written tables, colors, parsing and validation messages. */
#include "base/mesh.h"
#include "support/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static wf_mesh_t mk(int dp, int ring, int ul, int tp)
{
    wf_mesh_degrees_t d = {dp, ring, ul, tp};
    wf_mesh_t m;
    char err[256];
    wf_status_t st = wf_mesh_init(&m, &d, dp * ring * ul * tp, err, sizeof err);
    if (st != WF_OK) {
        fprintf(stderr, "mesh init failed: %s\n", err);
        exit(1);
    }
    return m;
}

/* Every rank round-trips through its coordinates, and the rank formula
 * is the row-major rule written out. */
static void test_roundtrip(void)
{
    static const int meshes[][4] = {{1, 1, 1, 1}, {2, 2, 2, 1}, {1, 2, 2, 2},
                                    {3, 1, 4, 1}, {1, 3, 2, 2}, {2, 1, 1, 5},
                                    {1, 8, 1, 1}, {1, 1, 8, 1}};
    for (size_t k = 0; k < sizeof meshes / sizeof meshes[0]; k++) {
        const int *d = meshes[k];
        wf_mesh_t m = mk(d[0], d[1], d[2], d[3]);
        for (int r = 0; r < m.world_size; r++) {
            wf_mesh_coords_t c;
            int back = -1;
            CHECK_TRUE(wf_mesh_coords(&m, r, &c) == WF_OK);
            CHECK_TRUE(wf_mesh_rank(&m, &c, &back) == WF_OK);
            CHECK_TRUE(back == r);
            CHECK_TRUE(r == ((c.dp * d[1] + c.ring) * d[2] + c.ulysses) * d[3] + c.tp);
        }
        wf_mesh_coords_t c;
        CHECK_TRUE(wf_mesh_coords(&m, m.world_size, &c) == WF_E_BAD_ARGUMENT);
        CHECK_TRUE(wf_mesh_coords(&m, -1, &c) == WF_E_BAD_ARGUMENT);
        wf_mesh_coords_t bad = {0, d[1], 0, 0};
        int r;
        CHECK_TRUE(wf_mesh_rank(&m, &bad, &r) == WF_E_BAD_ARGUMENT);
    }
}

/* Compare every rank's group along `dim` with a table of groups (each
 * row one group, in group order). */
static void check_groups(const wf_mesh_t *m, wf_mesh_dim_t dim, int ngroups,
                         int gsize, const int *table)
{
    for (int g = 0; g < ngroups; g++) {
        for (int i = 0; i < gsize; i++) {
            int rank = table[g * gsize + i];
            int got[64], size = -1, index = -1, color = -1, key = -1;
            CHECK_TRUE(wf_mesh_group(m, dim, rank, got, 64, &size, &index) == WF_OK);
            CHECK_TRUE(size == gsize);
            CHECK_TRUE(index == i);
            for (int j = 0; j < gsize && j < size; j++)
                CHECK(got[j] == table[g * gsize + j], "dim %s rank %d: member %d is %d, want %d",
                      wf_mesh_dim_name(dim), rank, j, got[j], table[g * gsize + j]);
            CHECK_TRUE(wf_mesh_color(m, dim, rank, &color, &key) == WF_OK);
            CHECK_TRUE(color == table[g * gsize]); /* lowest rank of the group */
            CHECK_TRUE(key == i);
        }
    }
}

static void test_groups_dp2_ring2_ul2(void)
{
    /* world 8, dp=2, ring=2, ulysses=2, tp=1:
     * rank = dp*4 + ring*2 + ulysses */
    wf_mesh_t m = mk(2, 2, 2, 1);
    static const int ul[] = {0, 1, 2, 3, 4, 5, 6, 7};
    static const int ring[] = {0, 2, 1, 3, 4, 6, 5, 7};
    static const int dp[] = {0, 4, 1, 5, 2, 6, 3, 7};
    static const int tp[] = {0, 1, 2, 3, 4, 5, 6, 7};
    static const int seq[] = {0, 1, 2, 3, 4, 5, 6, 7};
    check_groups(&m, WF_MESH_DIM_ULYSSES, 4, 2, ul);
    check_groups(&m, WF_MESH_DIM_RING, 4, 2, ring);
    check_groups(&m, WF_MESH_DIM_DP, 4, 2, dp);
    check_groups(&m, WF_MESH_DIM_TP, 8, 1, tp);
    check_groups(&m, WF_MESH_DIM_SEQ, 2, 4, seq);
}

static void test_groups_ring2_ul2_tp2(void)
{
    /* world 8, ring=2, ulysses=2, tp=2: rank = ring*4 + ulysses*2 + tp */
    wf_mesh_t m = mk(1, 2, 2, 2);
    static const int tp[] = {0, 1, 2, 3, 4, 5, 6, 7};
    static const int ul[] = {0, 2, 1, 3, 4, 6, 5, 7};
    static const int ring[] = {0, 4, 1, 5, 2, 6, 3, 7};
    static const int dp[] = {0, 1, 2, 3, 4, 5, 6, 7};
    /* seq: index = ring*2 + ulysses, tp fixed */
    static const int seq[] = {0, 2, 4, 6, 1, 3, 5, 7};
    check_groups(&m, WF_MESH_DIM_TP, 4, 2, tp);
    check_groups(&m, WF_MESH_DIM_ULYSSES, 4, 2, ul);
    check_groups(&m, WF_MESH_DIM_RING, 4, 2, ring);
    check_groups(&m, WF_MESH_DIM_DP, 8, 1, dp);
    check_groups(&m, WF_MESH_DIM_SEQ, 2, 4, seq);
}

static void test_groups_ring3_ul2_tp2(void)
{
    /* world 12, ring=3, ulysses=2, tp=2: rank = ring*4 + ulysses*2 + tp */
    wf_mesh_t m = mk(1, 3, 2, 2);
    static const int ring[] = {0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11};
    static const int ul[] = {0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11};
    static const int seq[] = {0, 2, 4, 6, 8, 10, 1, 3, 5, 7, 9, 11};
    check_groups(&m, WF_MESH_DIM_RING, 4, 3, ring);
    check_groups(&m, WF_MESH_DIM_ULYSSES, 6, 2, ul);
    check_groups(&m, WF_MESH_DIM_SEQ, 2, 6, seq);

    /* world 6, dp=3, ulysses=2: consecutive ulysses pairs */
    wf_mesh_t m2 = mk(3, 1, 2, 1);
    static const int ul2[] = {0, 1, 2, 3, 4, 5};
    static const int dp2[] = {0, 2, 4, 1, 3, 5};
    check_groups(&m2, WF_MESH_DIM_ULYSSES, 3, 2, ul2);
    check_groups(&m2, WF_MESH_DIM_DP, 2, 3, dp2);

    int buf[2];
    CHECK_TRUE(wf_mesh_group(&m, WF_MESH_DIM_SEQ, 0, buf, 2, NULL, NULL) == WF_E_LIMIT);
    CHECK_TRUE(wf_mesh_group(&m, (wf_mesh_dim_t)9, 0, NULL, 0, NULL, NULL) ==
               WF_E_BAD_ARGUMENT);
    CHECK_TRUE(wf_mesh_group(&m, WF_MESH_DIM_RING, 12, NULL, 0, NULL, NULL) ==
               WF_E_BAD_ARGUMENT);
}

/* For every mesh of a world and every dim, colors partition the world:
 * each rank lies in exactly one group, groups have the dim's size, and
 * ranks with one color list the same members. */
static void test_colors_partition(void)
{
    const int world = 24;
    int nmesh = 0;
    for (int dp = 1; dp <= world; dp++)
        for (int ring = 1; ring <= world; ring++)
            for (int ul = 1; ul <= world; ul++) {
                if (world % (dp * ring * ul) != 0)
                    continue;
                int tp = world / (dp * ring * ul);
                wf_mesh_t m = mk(dp, ring, ul, tp);
                nmesh++;
                for (int dim = 0; dim < WF_MESH_NGROUPS; dim++) {
                    int count[24] = {0}; /* members per color */
                    int keys_seen[24][24];
                    memset(keys_seen, 0, sizeof keys_seen);
                    int n = wf_mesh_group_size(&m, (wf_mesh_dim_t)dim);
                    for (int r = 0; r < world; r++) {
                        int color, key, members[24], size, index;
                        CHECK_TRUE(wf_mesh_color(&m, (wf_mesh_dim_t)dim, r, &color,
                                                 &key) == WF_OK);
                        CHECK_TRUE(wf_mesh_group(&m, (wf_mesh_dim_t)dim, r, members,
                                                 24, &size, &index) == WF_OK);
                        CHECK_TRUE(color >= 0 && color < world && color <= r);
                        CHECK_TRUE(size == n && index == key && members[key] == r);
                        CHECK_TRUE(members[0] == color);
                        count[color]++;
                        CHECK_TRUE(!keys_seen[color][key]);
                        keys_seen[color][key] = 1;
                        /* everyone in my group has my color */
                        for (int j = 0; j < size; j++) {
                            int c2, k2;
                            wf_mesh_color(&m, (wf_mesh_dim_t)dim, members[j], &c2,
                                          &k2);
                            CHECK_TRUE(c2 == color && k2 == j);
                        }
                    }
                    int total = 0;
                    for (int c = 0; c < world; c++) {
                        CHECK_TRUE(count[c] == 0 || count[c] == n);
                        total += count[c];
                    }
                    CHECK_TRUE(total == world);
                }
            }
    CHECK_TRUE(nmesh > 20);
}

static void test_validate(void)
{
    char err[256];
    wf_mesh_t m = mk(1, 1, 1, 1);
    wf_mesh_degrees_t d = {1, 2, 2, 1};
    CHECK_TRUE(wf_mesh_init(&m, &d, 8, err, sizeof err) == WF_E_BAD_FIELD);
    CHECK_TRUE(strstr(err, "is 4") && strstr(err, "world size (8)"));
    printf("  product error: %s\n", err);
    CHECK_TRUE(m.world_size == 1); /* untouched on error */

    wf_mesh_degrees_t z = {1, 0, 2, 1};
    CHECK_TRUE(wf_mesh_init(&m, &z, 2, err, sizeof err) == WF_E_BAD_FIELD);
    CHECK_TRUE(strstr(err, "`ring` degree must be greater than or equal to 1"));
    printf("  degree error:  %s\n", err);

    wf_mesh_degrees_t neg = {1, 1, 1, UINT32_MAX};
    CHECK_TRUE(wf_mesh_init(&m, &neg, 2, err, sizeof err) == WF_E_BAD_FIELD);
    CHECK_TRUE(strstr(err, "`tp`"));

    wf_mesh_degrees_t big = {65536, 65536, 65536, 65536};
    CHECK_TRUE(wf_mesh_init(&m, &big, 8, err, sizeof err) == WF_E_BAD_FIELD);
    CHECK_TRUE(strstr(err, "exceeds"));

    CHECK_TRUE(wf_mesh_init(&m, &d, 0, err, sizeof err) == WF_E_BAD_ARGUMENT);
    CHECK_TRUE(wf_mesh_init(&m, &d, 4, NULL, 0) == WF_OK);
    CHECK_TRUE(m.epoch == 0 && m.world_size == 4);

    /* reconfiguration: same world, epoch + 1; refused without change */
    wf_mesh_degrees_t d2 = {4, 1, 1, 1};
    CHECK_TRUE(wf_mesh_reconfigure(&m, &d2, err, sizeof err) == WF_OK);
    CHECK_TRUE(m.epoch == 1 && m.deg.dp == 4 && m.deg.ring == 1);
    wf_mesh_degrees_t d3 = {1, 8, 1, 1};
    CHECK_TRUE(wf_mesh_reconfigure(&m, &d3, err, sizeof err) == WF_E_BAD_FIELD);
    CHECK_TRUE(m.epoch == 1 && m.deg.dp == 4);

    /* heads */
    wf_mesh_t t = mk(1, 1, 1, 4);
    CHECK_TRUE(wf_mesh_check_heads(&t, 24, err, sizeof err) == WF_OK);
    CHECK_TRUE(wf_mesh_check_heads(&t, 6, err, sizeof err) == WF_E_BAD_ARGUMENT);
    CHECK_TRUE(strcmp(err, "Cannot shard 6 attention heads across 4 tensor-parallel "
                           "ranks: not divisible by 4.") == 0);
    printf("  heads error:   %s\n", err);
    CHECK_TRUE(wf_mesh_check_heads(&t, 0, err, sizeof err) == WF_E_BAD_ARGUMENT);
}

static void test_parse(void)
{
    wf_mesh_degrees_t d;
    char err[256];
    CHECK_TRUE(wf_mesh_parse("ring=2,ulysses=2", &d, err, sizeof err) == WF_OK);
    CHECK_TRUE(d.dp == 1 && d.ring == 2 && d.ulysses == 2 && d.tp == 1);
    CHECK_TRUE(wf_mesh_parse("dp=2,tp=2", &d, err, sizeof err) == WF_OK);
    CHECK_TRUE(d.dp == 2 && d.ring == 1 && d.ulysses == 1 && d.tp == 2);
    CHECK_TRUE(wf_mesh_parse(" tp = 4 , ring=3 ", &d, err, sizeof err) == WF_OK);
    CHECK_TRUE(d.dp == 1 && d.ring == 3 && d.ulysses == 1 && d.tp == 4);
    CHECK_TRUE(wf_mesh_parse("", &d, err, sizeof err) == WF_OK);
    CHECK_TRUE(d.dp == 1 && d.ring == 1 && d.ulysses == 1 && d.tp == 1);

    static const struct {
        const char *in;
        const char *msg; /* substring of the error */
    } bad[] = {
        {"ring=2,foo=2", "unknown mesh dim \"foo\""},
        {"ring=2,ring=4", "given twice"},
        {"ulysses=0", "`ulysses` degree must be greater than or equal to 1"},
        {"ring=two", "is not a number"},
        {"ring=", "is not a number"},
        {"ring=-2", "is not a number"},
        {"ring=2x", "is not a number"},
        {"ring=99999999999999999999", "is not a number"},
        {"ring 2", "name=value"},
        {"ring=2,", "item 2 is empty"},
        {",ring=2", "item 1 is empty"},
        {"ring=2,,tp=2", "item 2 is empty"},
        {"=2", "unknown mesh dim \"\""},
        {"RING=2", "unknown mesh dim"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        d.dp = 77;
        wf_status_t st = wf_mesh_parse(bad[i].in, &d, err, sizeof err);
        CHECK(st == WF_E_BAD_FIELD && strstr(err, bad[i].msg) && d.dp == 77,
              "parse \"%s\": status %d, message \"%s\"", bad[i].in, (int)st, err);
    }
    printf("  parse error:   %s\n", err);

    /* format parses back */
    wf_mesh_t m = mk(2, 1, 2, 3);
    m.epoch = 5;
    char line[128];
    CHECK_TRUE(wf_mesh_format(&m, line, sizeof line) == WF_OK);
    CHECK_TRUE(strcmp(line, "dp=2,ring=1,ulysses=2,tp=3 world=12 epoch=5") == 0);
    printf("  status line:   %s\n", line);
    *strchr(line, ' ') = '\0';
    CHECK_TRUE(wf_mesh_parse(line, &d, err, sizeof err) == WF_OK);
    CHECK_TRUE(d.dp == 2 && d.ring == 1 && d.ulysses == 2 && d.tp == 3);
    char tiny[8];
    CHECK_TRUE(wf_mesh_format(&m, tiny, sizeof tiny) == WF_E_LIMIT);
}

int main(void)
{
    test_roundtrip();
    test_groups_dp2_ring2_ul2();
    test_groups_ring2_ul2_tp2();
    test_groups_ring3_ul2_tp2();
    test_colors_partition();
    test_validate();
    test_parse();
    if (failed) {
        printf("test_mesh: %d failures\n", failed);
        return 1;
    }
    printf("test_mesh: all passed\n");
    return 0;
}

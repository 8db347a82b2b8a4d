/* placeholder: being written */
typedef int wf_placeholder_cpu_backend_t;

/* placeholder: being written */
typedef int wf_placeholder_server_t;

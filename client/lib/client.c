/* placeholder: being written */
typedef int wf_placeholder_client_t;

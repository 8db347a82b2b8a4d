/* placeholder: being written */
typedef int wf_placeholder_tensor_t;

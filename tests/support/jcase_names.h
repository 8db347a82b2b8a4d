/* jcase_names.h — short names for the columns of jcase_t tables
 * (jobcheck.h), so a case fits on one line. Include after weft.h in a
 * test's .c file only. Tests only. */
#ifndef WF_TEST_JCASE_NAMES_H
#define WF_TEST_JCASE_NAMES_H

#define F32 WF_DTYPE_F32
#define F16 WF_DTYPE_F16
#define BF16 WF_DTYPE_BF16
#define AG WF_ROTATE_ALLGATHER
#define A2A WF_ROTATE_ALLTOALL
#define DEF WF_OPT_DEFAULT
#define ON WF_OPT_ON
#define OFF WF_OPT_OFF

#endif /* WF_TEST_JCASE_NAMES_H */

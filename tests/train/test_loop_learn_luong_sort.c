/* Learnability of the sort task by an RNN with Luong attention (see learn_task.h). */
#include "learn_task.h"

int main(void) { return run_task(TASK_SORT, RNN_LUONG); }

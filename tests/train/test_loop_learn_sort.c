/* Learnability of the sort task by the Transformer (see learn_task.h). */
#include "learn_task.h"

int main(void) { return run_task(TASK_SORT, TRANSFORMER); }

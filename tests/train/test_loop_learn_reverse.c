/* Learnability of the reverse task by the Transformer (see learn_task.h). */
#include "learn_task.h"

int main(void) { return run_task(TASK_REVERSE, TRANSFORMER); }

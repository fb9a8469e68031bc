/* Learnability of the copy task by an RNN with Bahdanau attention (see learn_task.h). */
#include "learn_task.h"

int main(void) { return run_task(TASK_COPY, RNN_BAHDANAU); }

/* The batching policy of attn serve, without HTTP or a model: a batch waits for max_wait from
 * its oldest sentence unless it fills first, takes the oldest jobs' sentences in order (a job may
 * be split over batches), never mixes jobs with different search options, and closes at once
 * when the server drains. */
#include "harness.h"
#include "serve/batching.h"

static serve_job job(int64_t arrival_ms, int64_t sentences, int64_t beam)
{
    serve_job j = {0};
    j.arrival_ms = arrival_ms;
    j.options = attn_decode_default_options();
    j.options.beam_size = beam;
    j.decodable = sentences;
    return j;
}

static void link_jobs(serve_job *jobs, int n)
{
    for (int i = 0; i + 1 < n; i++)
        jobs[i].next = &jobs[i + 1];
    jobs[n - 1].next = NULL;
}

static void test_waits_for_more_until_max_wait(void)
{
    serve_job jobs[1] = {job(100, 3, 5)};
    link_jobs(jobs, 1);
    int64_t wait = -1;
    CHECK(serve_plan_batch(&jobs[0], 102, 8, 5, 0, &wait) == 0, "3 of 8 after 2 ms: wait");
    CHECK(wait == 3, "until the oldest has waited 5 ms: 3 ms left, got %lld", (long long)wait);
    CHECK(serve_plan_batch(&jobs[0], 105, 8, 5, 0, &wait) == 3, "after 5 ms: the 3 go");
    CHECK(serve_plan_batch(&jobs[0], 101, 8, 0, 0, &wait) == 3, "max_wait 0: at once");
    CHECK(serve_plan_batch(NULL, 101, 8, 5, 0, &wait) == 0 && wait == 0, "no job: nothing");
}

static void test_a_full_batch_goes_at_once_and_splits_jobs(void)
{
    serve_job jobs[3] = {job(100, 3, 5), job(101, 4, 5), job(101, 6, 5)};
    link_jobs(jobs, 3);
    int64_t wait = -1;
    CHECK(serve_plan_batch(&jobs[0], 101, 8, 5, 0, &wait) == 8, "13 waiting: 8 go at once");
    /* After the server took the first 8 (3 + 4 + 1 of the third job), 5 are left. */
    jobs[2].taken = 1;
    CHECK(serve_plan_batch(&jobs[2], 102, 8, 5, 0, &wait) == 0 && wait == 4,
          "5 left of a job queued at 101: wait until 106, got %lld", (long long)wait);
    CHECK(serve_plan_batch(&jobs[2], 102, 5, 5, 0, &wait) == 5, "5 fill a batch of 5");
}

static void test_different_searches_never_share_a_batch(void)
{
    serve_job jobs[3] = {job(100, 2, 5), job(100, 6, 1), job(100, 3, 5)};
    link_jobs(jobs, 3);
    CHECK(!serve_jobs_compatible(&jobs[0], &jobs[1]), "beam 5 and beam 1 differ");
    jobs[2].options.alignments = 1;
    CHECK(!serve_jobs_compatible(&jobs[0], &jobs[2]), "alignments differ");
    jobs[2].options.alignments = 0;
    jobs[2].options.nbest = 2;
    CHECK(!serve_jobs_compatible(&jobs[0], &jobs[2]), "nbest differs");
    jobs[2].options.nbest = 1;
    int64_t wait = -1;
    CHECK(serve_plan_batch(&jobs[0], 100, 5, 5, 0, &wait) == 5,
          "2 + 3 of beam 5 fill a batch of 5 past the beam-1 job");
    CHECK(serve_plan_batch(&jobs[0], 200, 8, 5, 0, &wait) == 5,
          "after max_wait: the 5 of beam 5, not the 6 of beam 1");
}

/* Classifications share a batch whatever else their requests ask (each text's answer does not
 * depend on the batch), but never with translations. */
static void test_classifications_share_batches_with_each_other_only(void)
{
    serve_job jobs[3] = {job(100, 2, 5), job(100, 3, 5), job(100, 4, 5)};
    jobs[0].task = jobs[2].task = SERVE_CLASSIFY;
    jobs[2].options.beam_size = 1; /* not read for a classification */
    link_jobs(jobs, 3);
    CHECK(serve_jobs_compatible(&jobs[0], &jobs[2]), "two classifications share a batch");
    CHECK(!serve_jobs_compatible(&jobs[0], &jobs[1]), "a classification and a translation do not");
    int64_t wait = -1;
    CHECK(serve_plan_batch(&jobs[0], 200, 8, 5, 0, &wait) == 6,
          "after max_wait: the 2 + 4 texts to classify, past the translation's 3");
}

static serve_job generate_job(int64_t arrival_ms, int64_t prompts, uint64_t seed)
{
    serve_job j = {0};
    j.arrival_ms = arrival_ms;
    j.task = SERVE_GENERATE;
    j.sampling = attn_sample_default_options();
    j.sampling.seed = seed;
    j.decodable = prompts;
    return j;
}

static void test_generations_share_a_batch_only_with_the_same_sampling(void)
{
    serve_job jobs[4] = {generate_job(100, 2, 7), generate_job(100, 3, 8), generate_job(100, 1, 7),
                         job(100, 4, 5)};
    link_jobs(jobs, 4);
    CHECK(serve_jobs_compatible(&jobs[0], &jobs[2]), "the same options and seed share");
    CHECK(!serve_jobs_compatible(&jobs[0], &jobs[1]), "another seed is another batch");
    CHECK(!serve_jobs_compatible(&jobs[0], &jobs[3]), "a translation never joins a generation");
    jobs[2].sampling.max_new_tokens = 5;
    CHECK(!serve_jobs_compatible(&jobs[0], &jobs[2]), "max_new_tokens differs");
    jobs[2].sampling.max_new_tokens = jobs[0].sampling.max_new_tokens;
    jobs[2].sampling.stop_token = ATTN_EOS_ID;
    CHECK(!serve_jobs_compatible(&jobs[0], &jobs[2]), "the stop token differs");
    jobs[2].sampling.stop_token = jobs[0].sampling.stop_token;
    int64_t wait = -1;
    CHECK(serve_plan_batch(&jobs[0], 100, 3, 5, 0, &wait) == 3,
          "2 + 1 prompts of seed 7 fill a batch of 3 past the seed-8 job");
}

static void test_draining_closes_at_once(void)
{
    serve_job jobs[1] = {job(100, 1, 5)};
    link_jobs(jobs, 1);
    int64_t wait = -1;
    CHECK(serve_plan_batch(&jobs[0], 100, 8, 1000, 1, &wait) == 1, "stopping: no waiting");
}

int main(void)
{
    RUN_TEST(test_waits_for_more_until_max_wait);
    RUN_TEST(test_a_full_batch_goes_at_once_and_splits_jobs);
    RUN_TEST(test_different_searches_never_share_a_batch);
    RUN_TEST(test_classifications_share_batches_with_each_other_only);
    RUN_TEST(test_generations_share_a_batch_only_with_the_same_sampling);
    RUN_TEST(test_draining_closes_at_once);
    return test_summary();
}

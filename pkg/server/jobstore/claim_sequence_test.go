package jobstore_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/claimwitness"
	"github.com/pulsequeue/pulse/pkg/server/jobstore"
)

// Sequenced jobs start one at a time in submit order across concurrent
// claimers on two stores, judged at every commit and on the jobs table.
func TestSequenceOrderUnderConcurrentClaimers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, claimwitness.InstallLimits(ctx, b.pool))
	setKeyLimits(t, b, "sq", 0, pulsetype.SequenceBlock)
	for i := range 3 {
		insertFlow(t, b, "sq", "", fmt.Sprintf("s%d", i), 15)
	}
	stores := []*jobstore.Store{b.store, newStore(t, b.pool)}
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := 0
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := stores[w%len(stores)]
			for {
				mu.Lock()
				finished := done >= 45
				mu.Unlock()
				if finished {
					return
				}
				got, ok := claimThenComplete(t, b, st, []string{"sq"}, slots(fmt.Sprintf("w%d", w), 1+w))
				if !ok {
					return
				}
				mu.Lock()
				done += len(got)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	starts, err := claimwitness.KeyStarts(ctx, b.pool)
	require.NoError(t, err)
	require.Len(t, starts, 45)
	for _, s := range starts {
		require.Empty(t, s.Violation())
	}
	var disorder int
	require.NoError(t, b.pool.QueryRow(ctx, `
        SELECT count(*) FROM jobs AS a JOIN jobs AS n
          ON n.topic = a.topic AND n.sequence_key = a.sequence_key AND n.sequence_pos > a.sequence_pos
        WHERE a.topic = 'sq' AND n.started_at < a.finished_at`).Scan(&disorder))
	require.Zero(t, disorder, "a later job of a sequence started before an earlier one finished")
}

// The sequence check taken out of the keyed claim: a sequence's head is
// its first pending job whatever runs before it. The witness sees what
// the real statement never does under the same claims: two jobs of one
// sequence running, a job started with earlier ones unfinished.
func TestSequenceWitnessSeesTheCheckTakenOut(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, claimwitness.InstallLimits(ctx, b.pool))
	mutant := strings.Replace(jobstore.ClaimLimitedSQL,
		"AND (j.status <> 'DEAD_LETTERED' OR k.on_failure = 'block')", "AND j.status IN ('PENDING', 'RETRYING')", 1)
	require.NotEqual(t, jobstore.ClaimLimitedSQL, mutant, "the sequence head's statuses are in the statement")
	m2 := strings.Replace(mutant, `r.sequence_key COLLATE "C" = substr(v.lane, 2) AND r.status = 'RUNNING')`,
		`r.sequence_key COLLATE "C" = substr(v.lane, 2) AND false)`, 1)
	require.NotEqual(t, mutant, m2, "the running-sequence check is in the statement")

	violations := map[string]int{}
	for topic, sql := range map[string]string{"sreal": jobstore.ClaimLimitedSQL, "smut": m2} {
		setKeyLimits(t, b, topic, 0, pulsetype.SequenceBlock)
		insertFlow(t, b, topic, "", "x", 3)
		for range 3 { // claims that never complete what they took
			_, err := b.store.ClaimLimitedWith(ctx, sql, []string{topic}, slots("w", 3), ttl)
			require.NoError(t, err)
		}
	}
	starts, err := claimwitness.KeyStarts(ctx, b.pool)
	require.NoError(t, err)
	started := map[string]int{}
	for _, s := range starts {
		started[s.Topic]++
		if s.Violation() != "" {
			violations[s.Topic]++
		}
	}
	require.Equal(t, 1, started["sreal"], "the real claim starts the head alone")
	require.Zero(t, violations["sreal"])
	require.Equal(t, 3, started["smut"])
	require.Equal(t, 2, violations["smut"], "the second and third starts broke the sequence")
	t.Logf("without the check: %d of %d starts broke the sequence", violations["smut"], started["smut"])
}

// What a failed head does: RETRYING holds the key; DEAD_LETTERED holds it
// under block until retried, and not under continue.
func TestSequenceOnFailure(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{pulsetype.SequenceBlock, pulsetype.SequenceContinue} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			setKeyLimits(t, b, "sf", 0, policy)
			jobs := insertFlow(t, b, "sf", "", "acct", 2)
			head, next := jobs[0].ID, jobs[1].ID

			got, err := b.store.Claim(ctx, []string{"sf"}, slots("w", 5), ttl)
			require.NoError(t, err)
			require.Len(t, got, 1)
			require.Equal(t, head, got[0].ID, "the head first, alone")

			acks, err := b.store.Report(ctx, "", []pulsetype.Result{{Ref: pulsetype.AttemptRef{ID: head, Attempt: got[0].Attempt},
				Outcome: pulsetype.OutcomeFailPermanent, Error: "boom", Worker: got[0].WorkerID}})
			require.NoError(t, err)
			require.True(t, acks[0].Accepted)

			got, err = b.store.Claim(ctx, []string{"sf"}, slots("w", 5), ttl)
			require.NoError(t, err)
			if policy == pulsetype.SequenceContinue {
				require.Len(t, got, 1)
				require.Equal(t, next, got[0].ID, "continue moves past a dead-lettered head")
				return
			}
			require.Empty(t, got, "block holds the key behind a dead-lettered head")
			_, err = b.store.Retry(ctx, head)
			require.NoError(t, err)
			got, err = b.store.Claim(ctx, []string{"sf"}, slots("w", 5), ttl)
			require.NoError(t, err)
			require.Len(t, got, 1)
			require.Equal(t, head, got[0].ID, "the retried head runs first")
			require.NoError(t, completeJobs(b, got))
			got, err = b.store.Claim(ctx, []string{"sf"}, slots("w", 5), ttl)
			require.NoError(t, err)
			require.Len(t, got, 1)
			require.Equal(t, next, got[0].ID)
		})
	}
}

func TestSequenceNeedsAPolicyAndKeysAreChecked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := newJob("nopolicy", 5)
	j.SequenceKey = "a"
	_, err := b.store.Insert(ctx, []pulsetype.NewJob{j})
	require.ErrorContains(t, err, "sequence_key")

	for _, bad := range []string{"a\x00b", "a\xffb", string(make([]byte, 256))} {
		j := newJob("kt", 5)
		j.ConcurrencyKey = bad
		_, err := b.store.Insert(ctx, []pulsetype.NewJob{j})
		require.ErrorContains(t, err, "concurrency_key")
	}
	jobs := insertFlow(t, b, "kt", "k", "", 1)
	_, err = b.pool.Exec(ctx, `UPDATE jobs SET concurrency_key = 'other' WHERE id = $1`, jobs[0].ID)
	require.ErrorContains(t, err, "concurrency_key", "a job's key never changes")

	setKeyLimits(t, b, "sq", 0, pulsetype.SequenceBlock)
	insertFlow(t, b, "sq", "", "s", 1)
	_, err = b.store.SetTopicKeyLimits(ctx, "sq", jobstore.KeyLimits{}, "alice")
	require.ErrorContains(t, err, "sequence_on_failure", "a policy with queued sequenced jobs stays")
	_, err = b.store.SetTopicKeyLimits(ctx, "sq", jobstore.KeyLimits{MaxRunningPerKey: ptr(0)}, "alice")
	require.ErrorContains(t, err, "max_running_per_key")
}

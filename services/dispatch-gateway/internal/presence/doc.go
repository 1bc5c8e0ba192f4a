// Package presence is the gateway's side of worker presence (migration
// 00006, ADR-0012): it records every StreamJobs stream this replica holds
// in worker_presence so that any replica can refuse a worker id already
// streaming under another identity, and control-api can say that no
// connected worker serves a job's topic.
//
// A stream's row is written when it opens (one statement, which is also
// the identity check), refreshed with every other stream of this gateway by
// one set-based upsert per PULSE_PRESENCE_INTERVAL, and deleted when it
// closes (closes that arrive together share one statement). A gateway that
// dies stops refreshing; its rows expire after PULSE_PRESENCE_TTL, readers
// ignore them from then on, and every refresh also sweeps a bounded batch
// of expired rows of any gateway. An idle gateway with any number of
// streams therefore costs one round trip per interval.
package presence

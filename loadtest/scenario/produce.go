package scenario

import "sync"

// produce sends jobs from producers goroutines: each sends its share (the
// last takes the remainder) through send, in calls of at most batch jobs,
// and stops at its first error. It returns the first error any producer
// met, or nil once every job was sent.
func produce(jobs, producers, batch int, send func(k int) error) error {
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	per := jobs / producers
	for i := range producers {
		n := per
		if i == producers-1 {
			n = jobs - per*(producers-1)
		}
		wg.Go(func() {
			for sent := 0; sent < n; {
				k := min(batch, n-sent)
				if err := send(k); err != nil {
					once.Do(func() { first = err })
					return
				}
				sent += k
			}
		})
	}
	wg.Wait()
	return first
}

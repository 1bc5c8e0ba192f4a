package pulse

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// errNextTwice answers an interceptor's second call of next: one job is
// submitted at most once per Enqueue.
var errNextTwice = errors.New("pulse: an enqueue interceptor called next more than once")

// intercepted wraps final in the client's interceptors, the first
// outermost.
func (c *Client) intercepted(final EnqueueFunc) EnqueueFunc {
	f := final
	for i := len(c.interceptors) - 1; i >= 0; i-- {
		ic, next := c.interceptors[i], f
		f = func(ctx context.Context, req *JobRequest) (Submitted, error) {
			var called sync.Once
			return ic(ctx, req, func(ctx context.Context, req *JobRequest) (Submitted, error) {
				first := false
				called.Do(func() { first = true })
				if !first {
					return Submitted{}, errNextTwice
				}
				if req == nil {
					return Submitted{}, errors.New("pulse: an enqueue interceptor passed a nil request to next")
				}
				return next(ctx, req)
			})
		}
	}
	return f
}

// interceptMany runs each job of EnqueueMany through the interceptors at
// once. The end of each chain waits there; once every job has reached it
// (or its chain answered on its own, without next), the jobs that reached
// it go out in one RPC and each chain is answered with its own result. If
// a chain returns an error before reaching the end, nothing is sent.
func (c *Client) interceptMany(ctx context.Context, jobs []JobRequest) ([]Submitted, error) {
	n := len(jobs)
	type arrival struct {
		i   int
		req JobRequest
	}
	type answer struct {
		res Submitted
		err error
	}
	reached := make(chan arrival)
	replies := make([]chan answer, n)
	type finish struct {
		i   int
		res Submitted
		err error
	}
	finished := make(chan finish, n)
	for i := range jobs {
		replies[i] = make(chan answer, 1)
		req := jobs[i]
		req.Options = append([]EnqueueOption(nil), req.Options...)
		final := func(ctx context.Context, r *JobRequest) (Submitted, error) {
			select {
			case reached <- arrival{i: i, req: *r}:
			case <-ctx.Done():
				return Submitted{}, ctx.Err()
			}
			a := <-replies[i]
			return a.res, a.err
		}
		go func() {
			res, err := c.intercepted(final)(ctx, &req)
			finished <- finish{i: i, res: res, err: err}
		}()
	}

	// Gather: every job either reached the end of its chain or finished.
	arrived := make([]*JobRequest, n)
	done := make([]bool, n)
	results := make([]Submitted, n)
	errs := make([]error, n)
	var abort error
	for settled := 0; settled < n && abort == nil; {
		select {
		case a := <-reached:
			req := a.req
			arrived[a.i] = &req
			settled++
		case f := <-finished:
			done[f.i], results[f.i], errs[f.i] = true, f.res, f.err
			if arrived[f.i] == nil {
				settled++
				if f.err != nil {
					abort = fmt.Errorf("job %d: %w", f.i, f.err)
				}
			}
		case <-ctx.Done():
			abort = ctx.Err()
		}
	}

	// Send the jobs that arrived, or answer them with the abort.
	var batch []JobRequest
	var at []int
	for i, r := range arrived {
		if r != nil {
			batch, at = append(batch, *r), append(at, i)
		}
	}
	if abort == nil && len(batch) > 0 {
		sent, err := c.submitMany(ctx, batch)
		for k, i := range at {
			if err != nil {
				replies[i] <- answer{err: err}
			} else {
				replies[i] <- answer{res: sent[k]}
			}
		}
	} else {
		for _, i := range at {
			replies[i] <- answer{err: fmt.Errorf("pulse: batch not sent: %w", abort)}
		}
	}

	// Collect every chain's own answer.
	for pending := countFalse(done); pending > 0; {
		select {
		case f := <-finished:
			done[f.i], results[f.i], errs[f.i] = true, f.res, f.err
			pending--
		case a := <-reached:
			// Reached the end after the batch was given up.
			replies[a.i] <- answer{err: fmt.Errorf("pulse: batch not sent: %w", abort)}
		case <-ctx.Done():
			if abort == nil {
				abort = ctx.Err()
			}
			return nil, abort
		}
	}
	if abort != nil {
		return nil, abort
	}
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("job %d: %w", i, err)
		}
	}
	return results, nil
}

func countFalse(bs []bool) int {
	n := 0
	for _, b := range bs {
		if !b {
			n++
		}
	}
	return n
}

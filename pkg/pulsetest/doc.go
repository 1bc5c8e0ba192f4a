// Package pulsetest helps an application test its use of pulse without a
// fleet, a database or a network beyond loopback.
//
//   - [Work] runs one handler on one job through a real [pulse.Worker],
//     with everything the worker does around a handler — its timeout, its
//     middleware, a panic recovered, [pulse.Permanent] and
//     [pulse.RetryAfter] turned into the result the worker reports — and
//     returns that result.
//   - [Control] is an in-process control-api: the application's real
//     [pulse.Client] enqueues to it, and the test asserts what was
//     enqueued ([Control.RequireEnqueued]).
//   - [Gateway] is an in-process dispatch-gateway the application's own
//     worker wiring connects to; [Gateway.Dispatch] sends it a job and
//     waits for what the worker reports. The lower-level harness it is
//     built on, package fakegateway, lets a test script a gateway message
//     by message.
//
// For jobs enqueued inside the application's own database transaction
// (package pulsetx), package pulsetxtest asserts on the jobs table in the
// same transaction.
//
// Every wait in this package fails the test after
// [fakegateway.Patience]; none of them sleeps.
package pulsetest

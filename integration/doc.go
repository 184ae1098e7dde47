// Package integration runs real pollworker processes against real
// redis-server processes and checks, from a fence-checking HTTP target, the
// promise users buy: every session polled, never by two workers with the
// same token, tokens never going backwards. TestChaos draws one fault of a
// fixed list per iteration; TestChaosGenerated draws plans of operator
// actions, faults, planted bad data and load (see RELIABILITY.md).
package integration

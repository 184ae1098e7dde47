// Package integration runs real pollworker processes against real
// redis-server processes and checks, from a fence-checking HTTP target, the
// promise users buy: every session polled, never by two workers with the
// same token, tokens never going backwards.
package integration

// Package ring is a fixed-size FIFO that overwrites its oldest element
// when full: the last results waiting to be written (results.Recorder),
// the last lease events shown on the status page.
package ring

// Ring holds the last Size elements pushed. It is not safe for concurrent
// use.
type Ring[T any] struct {
	buf     []T
	head, n int // the oldest element, and how many there are
}

// New returns a Ring of size elements; one of size 0 or less holds
// nothing (every push drops what it is given).
func New[T any](size int) *Ring[T] {
	return &Ring[T]{buf: make([]T, max(size, 0))}
}

// Len is how many elements r holds.
func (r *Ring[T]) Len() int { return r.n }

// Push appends v and reports whether an element was dropped for it: the
// oldest when r is full, v itself when r holds nothing.
func (r *Ring[T]) Push(v T) (dropped bool) {
	switch {
	case len(r.buf) == 0:
		return true
	case r.n == len(r.buf):
		r.buf[r.head] = v
		r.head = (r.head + 1) % len(r.buf)
		return true
	}
	r.buf[(r.head+r.n)%len(r.buf)] = v
	r.n++
	return false
}

// Drain appends every element to dst, oldest first, and empties r (its
// slots are zeroed, so that r keeps nothing alive).
func (r *Ring[T]) Drain(dst []T) []T {
	var zero T
	for i := range r.n {
		j := (r.head + i) % len(r.buf)
		dst = append(dst, r.buf[j])
		r.buf[j] = zero
	}
	r.head, r.n = 0, 0
	return dst
}

// Newest appends every element to dst, newest first, keeping them.
func (r *Ring[T]) Newest(dst []T) []T {
	for i := r.n - 1; i >= 0; i-- {
		dst = append(dst, r.buf[(r.head+i)%len(r.buf)])
	}
	return dst
}

//go:build !linux

package main

import "errors"

// cpuCage holds processes to a share of the CPUs; only on Linux (cgroups).
type cpuCage struct{}

func newCPUCage(string, float64) (*cpuCage, error) {
	return nil, errors.New("cpu cage: cgroups are Linux only")
}

func (c *cpuCage) add(int) error { return nil }
func (c *cpuCage) close() error  { return nil }

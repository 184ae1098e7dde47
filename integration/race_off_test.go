//go:build !race

package integration

// raceDetector is set in a -race build, which runs several times slower:
// load tests scale down under it.
const raceDetector = false

//go:build race

package deflate

// raceScale shrinks a test's work under the race detector, which slows
// compression several-fold and finds nothing more in single-goroutine code
// by running it longer.
func raceScale(n int) int { return max(1, n/3) }

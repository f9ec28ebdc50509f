//go:build !race

package recompress

// raceEnabled is set under the race detector, which slows compression
// several-fold: long tests try fewer inputs.
const raceEnabled = false

//go:build race

package wire

// raceBuild: the race detector allocates behind the code's back, so
// allocation counts are not checked under -race.
const raceBuild = true

//go:build race

package main

// raceBuild: under go test -race, the binary the process tests run is built
// with -race too, so the signal goroutine is checked where it runs.
const raceBuild = true

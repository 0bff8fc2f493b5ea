//go:build !linux

package kvindex

import "unsafe"

// prefault is Linux's: elsewhere each page faults when first touched.
func prefault(unsafe.Pointer, uintptr) error { return nil }

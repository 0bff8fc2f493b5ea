package kvindex

import (
	"errors"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// freshPages maps n pages no one has touched yet, as small pages, so that
// unprefaulted writes fault once per page even where transparent huge
// pages are always on. It skips the test on kernels that cannot prefault.
func freshPages(t *testing.T, n int) []byte {
	t.Helper()
	mem, err := unix.Mmap(-1, 0, n*unix.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Munmap(mem) })
	// A kernel built without huge pages refuses this, and has small ones.
	_ = unix.Madvise(mem, unix.MADV_NOHUGEPAGE)
	probe, err := unix.Mmap(-1, 0, unix.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(probe)
	if err := unix.Madvise(probe, unix.MADV_POPULATE_WRITE); errors.Is(err, unix.EINVAL) {
		t.Skip("this kernel has no MADV_POPULATE_WRITE (Linux 5.14)")
	}
	return mem
}

// minorFaults returns the process's minor page faults so far.
func minorFaults(t *testing.T) int64 {
	var u unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &u); err != nil {
		t.Fatal(err)
	}
	return u.Minflt
}

// faultsWriting writes one byte per page of mem and returns how many page
// faults that took (give or take a few from the rest of the process).
func faultsWriting(t *testing.T, mem []byte) int64 {
	before := minorFaults(t)
	for i := 0; i < len(mem); i += unix.Getpagesize() {
		mem[i] = 1
	}
	return minorFaults(t) - before
}

func TestPrefaultSparesTheFaults(t *testing.T) {
	const pages = 1024
	mem := freshPages(t, pages)
	if err := prefault(unsafe.Pointer(&mem[0]), uintptr(len(mem))); err != nil {
		t.Fatal(err)
	}
	if faults := faultsWriting(t, mem); faults > pages/8 {
		t.Fatalf("writing %d prefaulted pages took %d page faults", pages, faults)
	}
}

// TestPrefaultKeepsToWholePages: memory that does not start or end on a
// page boundary (a Go allocation need not) gets the whole pages inside it
// prefaulted, and nothing outside it.
func TestPrefaultKeepsToWholePages(t *testing.T) {
	const pages = 64
	page := unix.Getpagesize()
	mem := freshPages(t, pages)
	if err := prefault(unsafe.Pointer(&mem[1]), uintptr(len(mem)-2)); err != nil {
		t.Fatal(err)
	}
	if faults := faultsWriting(t, mem[page:len(mem)-page]); faults > pages/8 {
		t.Fatalf("writing the %d whole pages inside took %d page faults", pages-2, faults)
	}
	if faults := faultsWriting(t, mem[:1]) + faultsWriting(t, mem[len(mem)-1:]); faults < 2 {
		t.Fatalf("the two partial pages at the ends took %d faults when written, want 2: one was prefaulted", faults)
	}
}

// Package outfile is the one way the program writes a file: beside the
// target under a name no other process can take, synced, then renamed over
// it. A reader of the target sees the old file or the new one whole, never
// a torn one; a failed write leaves the old file (or none) and says which
// path failed and why.
package outfile

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// tempMark sits between a temporary file's target name and its unique
// tail: .NAME.tmp-PID-8HEX.
const tempMark = ".tmp-"

// File is a file being written. Nothing appears at its path until Commit.
type File struct {
	path string
	tmp  *os.File
	err  error // the first write error: Commit then fails with it
}

// Create starts writing path. The temporary name is the target's with the
// process id and 8 hex digits from crypto/rand: the pods of one sweep all
// run as PID 1 on one shared volume, and the router's own random stream is
// seeded (the same in every pod), so neither alone is unique.
func Create(path string) (*File, error) {
	// A link is written through, to the file it names; a device, a pipe
	// or a socket cannot be replaced whole without destroying it (a rename
	// over /dev/null replaces the device).
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return nil, fmt.Errorf("writing %s: not a regular file (%s): it is written whole by a rename over it, so give a file's path", path, kind(st.Mode()))
	}
	var tail [4]byte
	if _, err := rand.Read(tail[:]); err != nil {
		return nil, fmt.Errorf("writing %s: %w", path, err)
	}
	dir, name := filepath.Split(path)
	// Not filepath.Join, which would clean "missing/../" away: the
	// temporary file must be made through the same folders as the target.
	tmp := dir + "." + name + tempMark + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(tail[:])
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, pathError(path, err)
	}
	file := &File{path: path, tmp: f}
	open.Lock()
	open.files[file] = true
	open.Unlock()
	return file, nil
}

// open is every File not yet committed or discarded, for DiscardAll.
var open = struct {
	sync.Mutex
	files map[*File]bool
}{files: map[*File]bool{}}

// DiscardAll discards every file being written, from any goroutine: a
// process about to exit before its work ends leaves no temporary files.
func DiscardAll() {
	open.Lock()
	defer open.Unlock()
	for f := range open.files {
		f.tmp.Close()
		os.Remove(f.tmp.Name())
	}
	clear(open.files)
}

// closed takes f off the open list.
func (f *File) closed() {
	open.Lock()
	delete(open.files, f)
	open.Unlock()
}

// Write writes to the temporary file. After an error every later write
// fails with it, and so does Commit.
func (f *File) Write(p []byte) (int, error) {
	if f.err != nil {
		return 0, f.err
	}
	n, err := f.tmp.Write(p)
	if err != nil {
		f.err = pathError(f.path, err)
	}
	return n, f.err
}

// Commit syncs the file and renames it over the target, then syncs the
// folder so that the rename survives a crash. On any error the temporary
// file is removed and the target is as it was.
func (f *File) Commit() error {
	defer f.closed()
	if f.err != nil { // named already
		f.Discard()
		return f.err
	}
	err := f.tmp.Sync()
	if cerr := f.tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.tmp.Name(), f.path)
	}
	if err != nil {
		os.Remove(f.tmp.Name())
		return pathError(f.path, err)
	}
	syncDir(filepath.Dir(f.path))
	return nil
}

// Discard drops what was written; the target is as it was. It may follow
// a Commit, which it then leaves alone.
func (f *File) Discard() {
	f.closed()
	if f.tmp.Close() == nil {
		os.Remove(f.tmp.Name())
	}
}

// Write writes data to path whole, or leaves path as it was.
func Write(path string, data []byte) error {
	f, err := Create(path)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Discard()
		return err
	}
	return f.Commit()
}

// IsTemp reports whether a file name is one of Create's temporary names,
// left behind by a process killed before it could remove it.
func IsTemp(name string) bool {
	name = filepath.Base(name)
	i := strings.LastIndex(name, tempMark)
	if !strings.HasPrefix(name, ".") || i < 1 {
		return false
	}
	pid, hexTail, ok := strings.Cut(name[i+len(tempMark):], "-")
	if _, err := strconv.Atoi(pid); err != nil || !ok || len(hexTail) != 8 {
		return false
	}
	_, err := hex.DecodeString(hexTail)
	return err == nil
}

// kind names what a path that is not a regular file is.
func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a folder"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "not a plain file"
}

// syncDir makes a rename in dir durable. A folder that cannot be opened or
// synced (some filesystems refuse) leaves the rename done but not yet on
// disk, which is no worse than not trying.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// pathError names the target, not the temporary file, with the OS's
// reason: "writing out/report.json: file too large".
func pathError(path string, err error) error {
	var pe *fs.PathError
	var le *os.LinkError
	switch {
	case errors.As(err, &pe):
		err = pe.Err
	case errors.As(err, &le):
		err = le.Err
	}
	return fmt.Errorf("writing %s: %w", path, err)
}

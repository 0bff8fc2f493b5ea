// Command soak streams a long generated session through offline-router and
// checks that its resident memory stays flat once warm (every request ends,
// and the stream evicts what it stores) and that its output is the same on
// every run.
package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/offline-router/offline-router/internal/workload"
)

func main() {
	binary := flag.String("binary", "./offline-router", "the offline-router binary")
	commands := flag.Int("commands", 10_000_000, "about this many command lines")
	runs := flag.Int("runs", 2, "runs to compare for determinism")
	samples := flag.Int("samples", 10, "RSS samples per run")
	flag.Parse()
	var first string
	ok := true
	for run := 1; run <= *runs; run++ {
		sum, rss, err := soak(*binary, *commands, *samples)
		if err != nil {
			fmt.Fprintln(os.Stderr, "soak:", err)
			os.Exit(1)
		}
		fmt.Printf("run %d: output sha256 %s\n", run, sum)
		fmt.Printf("  %12s %10s\n", "commands", "RSS MB")
		for _, s := range rss {
			fmt.Printf("  %12d %10.1f\n", s.lines, s.mb)
		}
		// Warm = after the first tenth; the end must not exceed it by more
		// than a fifth.
		base, last := rss[len(rss)/10].mb, rss[len(rss)-1].mb
		flat := last <= base*1.2
		fmt.Printf("  warm RSS %.1f MB, final %.1f MB: flat %v\n", base, last, flat)
		ok = ok && flat
		if run == 1 {
			first = sum
		} else if sum != first {
			fmt.Println("  output differs from run 1: NOT deterministic")
			ok = false
		}
	}
	if !ok {
		os.Exit(1)
	}
	fmt.Println("soak passed")
}

type sample struct {
	lines int
	mb    float64
}

func soak(binary string, commands, samples int) (string, []sample, error) {
	cmd := exec.Command(binary, "--evidence", "summary")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	m := workload.DefaultMixed(commands, 1)
	m.Steady = true
	go func() {
		w := bufio.NewWriterSize(stdin, 1<<20)
		m.Write(w)
		w.Flush()
		stdin.Close()
	}()
	h := sha256.New()
	r := bufio.NewReaderSize(stdout, 1<<20)
	every := max(commands/samples, 1)
	var rss []sample
	lines := 0
	for {
		line, err := r.ReadSlice('\n')
		if len(line) > 0 {
			h.Write(line)
			if lines++; lines%every == 0 {
				// Only while the router is alive: once it exits there is no RSS.
				if mb := residentMB(cmd.Process.Pid); mb > 0 {
					rss = append(rss, sample{lines, mb})
				}
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil && err != bufio.ErrBufferFull {
			return "", nil, err
		}
	}
	if err := cmd.Wait(); err != nil {
		return "", nil, err
	}
	if len(rss) < 2 {
		return "", nil, fmt.Errorf("only %d RSS samples: use more commands", len(rss))
	}
	return fmt.Sprintf("%x", h.Sum(nil)), rss, nil
}

// residentMB reads VmRSS from /proc (Linux).
func residentMB(pid int) float64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, l := range bytes.Split(data, []byte("\n")) {
		if f := strings.Fields(string(l)); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

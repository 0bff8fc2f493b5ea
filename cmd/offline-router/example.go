package main

import (
	"bufio"
	"bytes"
	"fmt"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/offline-router/offline-router/examples"
	"github.com/offline-router/offline-router/internal/engine"
	"github.com/offline-router/offline-router/internal/protocol"
	"github.com/offline-router/offline-router/internal/scenario"
	"github.com/offline-router/offline-router/internal/wire"
)

func newExampleCommand(log *zerolog.Logger) *cobra.Command {
	raw := false
	cmd := &cobra.Command{
		Use:   "example",
		Short: "Run the built-in example session and show each command with its response",
		Long: `Runs a small built-in session (workers, KV events, a cache-aware placement,
a request's lifecycle, an error) through the router with the default config,
and prints each command line (>) followed by its response (<).
With --raw it prints the session's command lines alone, ready to pipe into
offline-router.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			session := scenario.Commands(examples.Session) // without its recorded responses
			if raw {
				_, err := out.Write(session)
				return err
			}
			eng, err := engine.New(protocol.DefaultConfig())
			if err != nil {
				return err
			}
			var responses bytes.Buffer
			if _, err := wire.Serve(bytes.NewReader(session), &responses, eng, wire.ServeOptions{}); err != nil {
				return err
			}
			resp := bufio.NewScanner(&responses)
			resp.Buffer(nil, 1<<20)
			for _, line := range bytes.Split(bytes.TrimRight(session, "\n"), []byte("\n")) {
				if wire.IsComment(line) {
					fmt.Fprintf(out, "%s\n", line)
					continue
				}
				resp.Scan()
				fmt.Fprintf(out, "> %s\n< %s\n", line, resp.Bytes())
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&raw, "raw", false, "print the session's command lines only")
	return cmd
}

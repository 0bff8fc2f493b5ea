package wire

import (
	"bytes"
	"fmt"
	"math"
	"strings"

	"github.com/goccy/go-json"

	"github.com/offline-router/offline-router/internal/protocol"
)

// Override sets one config key (dotted for nested keys, as in
// "affinity.mode") from a flag; it is applied after the file.
type Override struct {
	Key   string
	Value any
	Flag  string // the flag that set it ("--queue-threshold"), for messages
	// Lines are the lines, in the file a flag names, of the paths the
	// override sets ("policy_classes[1].quantum"), so that a check of the
	// config names the line as well as the flag.
	Lines map[string]int
}

// ConfigSource is the config a serve starts from, before its stream says
// anything: a config file and flags, each setting some keys explicitly.
type ConfigSource struct {
	// Defaults replace protocol.DefaultConfig's for some keys, under the
	// file: a command's own defaults (replay's block size of 512, as in
	// Mooncake traces).
	Defaults  []Override
	File      []byte
	FileName  string
	Overrides []Override
}

// Load builds the config of the source alone.
func (cs ConfigSource) Load() (protocol.Config, error) {
	return loadConfig(cs.Defaults, cs.fileLabel(), cs.File, cs.Overrides)
}

// fileLabel names the config file in messages.
func (cs ConfigSource) fileLabel() string {
	if cs.FileName == "" {
		return "config file"
	}
	return "--config " + cs.FileName
}

// Merge is the config a config command makes of the source: the command's
// keys over the file and flags, validated as a whole. A key the file or a
// flag set explicitly to another value is a conflict, and an error naming
// both.
func (cs ConfigSource) Merge(u *protocol.ConfigUpdate) (protocol.Config, *protocol.Error) {
	base, err := cs.Load()
	if err != nil {
		return base, protocol.Errorf(protocol.CodeInvalidField, "%v", err)
	}
	explicit := cs.explicitKeys()
	overrides := append([]Override(nil), cs.Overrides...)
	for _, k := range u.Keys {
		given, had := configValue(&u.Config, k), configValue(&base, k)
		if src, ok := explicit[k]; ok && !bytes.Equal(given, had) {
			return base, protocol.Errorf(protocol.CodeInvalidField, "field %q: the config command sets %s, but %s set %s; give it in one place", k, given, src, had)
		}
		overrides = append(overrides, Override{Key: k, Value: json.RawMessage(given)})
	}
	cfg, err := loadConfig(cs.Defaults, cs.fileLabel(), cs.File, overrides)
	if err != nil {
		return base, protocol.Errorf(protocol.CodeInvalidField, "%v", err)
	}
	return cfg, nil
}

// Configure is what ServeOptions.Configure wants: it merges a stream's
// config command into the source and builds the stepper with newStepper.
func (cs ConfigSource) Configure(newStepper func(protocol.Config) (Stepper, error)) func(*protocol.ConfigUpdate) (Stepper, *protocol.Config, *protocol.Error) {
	return func(u *protocol.ConfigUpdate) (Stepper, *protocol.Config, *protocol.Error) {
		cfg, perr := cs.Merge(u)
		if perr != nil {
			return nil, nil, perr
		}
		eng, err := newStepper(cfg)
		if err != nil {
			return nil, nil, protocol.Errorf(protocol.CodeInvalidField, "%v", err)
		}
		return eng, &cfg, nil
	}
}

// explicitKeys maps each key the file or a flag set to where it was set.
func (cs ConfigSource) explicitKeys() map[string]string {
	out := map[string]string{}
	var keys []string
	scratch := protocol.DefaultConfig()
	if decodeConfigFile("", cs.File, &scratch, &keys) == nil {
		for _, k := range keys {
			out[k] = "--config " + cs.FileName
		}
	}
	for _, o := range cs.Overrides {
		out[o.Key] = o.Flag
	}
	return out
}

// LoadConfig builds a Config from the defaults, then the JSON file contents
// (may be empty), then the overrides, and validates the result.
func LoadConfig(file []byte, overrides []Override) (protocol.Config, error) {
	return loadConfig(nil, "config file", file, overrides)
}

// loadConfig is LoadConfig with some defaults replaced first, and the file
// named as label in messages.
func loadConfig(defaults []Override, label string, file []byte, overrides []Override) (protocol.Config, error) {
	c := protocol.DefaultConfig()
	for _, o := range defaults {
		if err := applyOverride(&c, o); err != nil {
			return c, err
		}
	}
	if err := decodeConfigFile(label, file, &c, nil); err != nil {
		return c, err
	}
	for _, o := range overrides {
		if err := applyOverride(&c, o); err != nil {
			return c, err
		}
	}
	return c, nameTheFlag(c.Validate(), overrides)
}

// applyOverride sets one key, read by the same strict decoder as a file.
func applyOverride(c *protocol.Config, o Override) error {
	name := "config " + o.Key
	if o.Flag != "" { // name what the user typed, with the key it sets
		name = o.Flag + " (config " + o.Key + ")"
	}
	if f, ok := o.Value.(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
		return fmt.Errorf("%s: expected a finite number, got %v", name, f)
	}
	v, err := json.Marshal(o.Value)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	doc := string(v)
	parts := strings.Split(o.Key, ".")
	for i := len(parts) - 1; i >= 0; i-- {
		doc = fmt.Sprintf("{%q:%s}", parts[i], doc)
	}
	s := scanner{b: []byte(doc)}
	if _, err := decodeConfigKeys(&s, c, nil); err != nil {
		return fmt.Errorf("%s: %s", name, err.wire().Message)
	}
	return nil
}

// decodeConfigFile reads a config file's keys into c (an empty file has
// none), and into keys if it is set. An error names the file as label, and
// the line the scanner stopped on.
func decodeConfigFile(label string, file []byte, c *protocol.Config, keys *[]string) error {
	if len(bytes.TrimSpace(file)) == 0 {
		return nil
	}
	s := scanner{b: file}
	got, err := decodeConfigKeys(&s, c, nil)
	if err == nil && !s.atEnd() {
		err = s.syntax("unexpected data after the config object")
	}
	if err != nil {
		line := 1 + bytes.Count(file[:min(s.i, len(file))], []byte("\n"))
		return fmt.Errorf("%s line %d: %s", label, line, err.wire().Message)
	}
	if keys != nil {
		*keys = got
	}
	return nil
}

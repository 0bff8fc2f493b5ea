package wire

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/goccy/go-json"

	"github.com/offline-router/offline-router/internal/protocol"
)

// Override sets one config key (dotted for nested keys, as in
// "affinity.mode") from a flag; it is applied after the file.
type Override struct {
	Key   string
	Value any
}

// LoadConfig builds a Config from the defaults, then the JSON file contents
// (may be empty), then the overrides, and validates the result.
func LoadConfig(file []byte, overrides []Override) (protocol.Config, error) {
	c := protocol.DefaultConfig()
	if len(bytes.TrimSpace(file)) > 0 {
		if err := decodeStrict(file, &c); err != nil {
			return c, fmt.Errorf("config file: %w", err)
		}
	}
	for _, o := range overrides {
		v, err := json.Marshal(o.Value)
		if err != nil {
			return c, fmt.Errorf("config %s: %w", o.Key, err)
		}
		doc := string(v)
		parts := strings.Split(o.Key, ".")
		for i := len(parts) - 1; i >= 0; i-- {
			doc = fmt.Sprintf("{%q:%s}", parts[i], doc)
		}
		if err := decodeStrict([]byte(doc), &c); err != nil {
			return c, fmt.Errorf("config %s: %w", o.Key, err)
		}
	}
	return c, c.Validate()
}

func decodeStrict(data []byte, c *protocol.Config) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(c); err != nil {
		return err
	}
	if d.More() {
		return fmt.Errorf("unexpected data after the config object")
	}
	return nil
}

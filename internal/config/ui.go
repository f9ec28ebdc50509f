package config

import "fmt"

// UI is cairn's built-in web page (off by default).
type UI struct {
	Enabled bool `yaml:"enabled"`
	// Listener is "main" (under /ui on the API listener, behind its
	// authentication) or "debug" (the operators' listener, http.debug.addr).
	Listener string `yaml:"listener"`
}

func (u *UI) validate(debugAddr string) error {
	switch u.Listener {
	case "", "main":
	case "debug":
		if u.Enabled && debugAddr == "" {
			return fmt.Errorf("config: ui.listener: debug needs http.debug.addr")
		}
	default:
		return fmt.Errorf("config: ui.listener: %q is not main or debug", u.Listener)
	}
	return nil
}

package app

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// fileConfig is what `pulse login` saves in
// os.UserConfigDir()/pulse/config.json (mode 0600).
type fileConfig struct {
	Server   string `json:"server"`
	User     string `json:"user,omitempty"`
	Password string `json:"password,omitempty"`
	Token    string `json:"token,omitempty"`
}

func configPath() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("no user config directory: %w", err)
	}
	return filepath.Join(dir, "pulse", "config.json"), nil
}

func loadConfig() (fileConfig, string, error) {
	var c fileConfig
	p, err := configPath()
	if err != nil {
		return c, "", nil //nolint:nilerr // no config dir: behave as if there were no file
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return c, p, nil
	}
	if err != nil {
		return c, p, fmt.Errorf("reading %s: %w", p, err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, p, fmt.Errorf("config file %s is not valid JSON: %w", p, err)
	}
	return c, p, nil
}

func saveConfig(c fileConfig) (string, error) {
	p, err := configPath()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return "", fmt.Errorf("creating %s: %w", filepath.Dir(p), err)
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return "", err
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return "", fmt.Errorf("writing %s: %w", p, err)
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, p); err != nil {
		return "", fmt.Errorf("writing %s: %w", p, err)
	}
	return p, nil
}

// conn is one resolved connection: where to, with which credential, and
// where each came from.
type conn struct {
	Server       string `json:"server"`
	ServerSource string `json:"server_source"`
	User         string `json:"user,omitempty"`
	password     string
	token        string
	Auth         string `json:"auth"`
	AuthSource   string `json:"auth_source,omitempty"`
}

type layer struct {
	name                          string
	server, user, password, token string
}

// resolve applies the precedence flag > environment > config file. The
// server is taken from the first layer that names one; the credential as a
// whole (user+password or token) from the first layer that has any, so a
// flag user is never paired with a file password.
func resolve(layers []layer) conn {
	var c conn
	for _, l := range layers {
		if l.server != "" {
			c.Server, c.ServerSource = l.server, l.name
			break
		}
	}
	c.Auth = "none"
	for _, l := range layers {
		if l.token != "" || l.user != "" {
			c.AuthSource = l.name
			if l.token != "" {
				c.token, c.Auth = l.token, "bearer"
			} else {
				c.User, c.password, c.Auth = l.user, l.password, "basic"
			}
			break
		}
	}
	return c
}

package policies

import (
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Bounds of a policy's env: every call carries the variables, and an
// environment counts against the kernel's argument space (ARG_MAX).
const (
	maxEnvVars  = 128
	maxEnvBytes = 32 << 10 // NAME=VALUE summed
)

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// envVar is one entry of a file's env, as written: the name keeps its case
// (viper's decoding would fold it).
type envVar struct {
	name, value string
	null        bool // "NAME:" with no value
}

// envVars reads the env mapping of a file's root node, in file order. The
// key matches as checkNode matches it (case-insensitively); checkNode has
// already reported a wrong shape, so anything else is skipped here.
func envVars(root *yaml.Node) []envVar {
	if root.Kind != yaml.MappingNode {
		return nil
	}
	var out []envVar
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if !strings.EqualFold(k.Value, "env") || v.Kind != yaml.MappingNode {
			continue
		}
		for j := 0; j+1 < len(v.Content); j += 2 {
			name, val := v.Content[j], v.Content[j+1]
			if name.Kind != yaml.ScalarNode || val.Kind != yaml.ScalarNode {
				continue
			}
			out = append(out, envVar{name: name.Value, value: val.Value, null: val.Tag == "!!null"})
		}
	}
	return out
}

// compileEnv checks the variables a policy adds to every call: shell
// identifiers, never the managed DSH_* nor the agent's SHELLBOX_*, values
// without NUL, within the bounds.
func compileEnv(l *located, p *Policy, vars []envVar) {
	total := 0
	for _, v := range vars {
		key := "env." + v.name
		total += len(v.name) + 1 + len(v.value)
		switch {
		case !envNameRE.MatchString(v.name):
			l.addf(key, "%q is not a variable name: letters, digits and _, not starting with a digit", v.name)
		case strings.HasPrefix(v.name, "DSH_"):
			l.addf(key, "DSH_* variables are shellbox's managed environment; a policy cannot set them")
		case strings.HasPrefix(v.name, "SHELLBOX_"):
			l.addf(key, "SHELLBOX_* variables configure shellbox and its agent; a policy cannot set them")
		case v.null:
			l.addf(key, `no value (write "" for an empty one)`)
		case strings.ContainsRune(v.value, 0):
			l.addf(key, "the value contains a NUL byte")
		default:
			if p.Env == nil {
				p.Env = map[string]string{}
			}
			p.Env[v.name] = v.value
		}
	}
	if len(vars) > maxEnvVars {
		l.addf("env", "%d variables: at most %d", len(vars), maxEnvVars)
	}
	if total > maxEnvBytes {
		l.addf("env", "%d bytes (NAME=VALUE summed): at most %d", total, maxEnvBytes)
	}
}

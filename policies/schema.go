package policies

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// The file schema: exactly what a policy file may say. policies/README.md is
// its reference; every field here has a row there. Field names are the
// mapstructure tags, which viper decodes and which checkNode uses to name keys.

// fileSchema is a whole file. Its Env is decoded only so that viper accepts
// the key: viper folds map keys to lower case and variable names keep
// theirs, so the loader reads the variables from the YAML node (envVars).
type fileSchema struct {
	Version     int               `mapstructure:"version"`
	Description string            `mapstructure:"description"`
	Default     string            `mapstructure:"default"`
	Unparseable string            `mapstructure:"unparseable"`
	Opaque      string            `mapstructure:"opaque"`
	AskTimeout  time.Duration     `mapstructure:"askTimeout"`
	Env         map[string]string `mapstructure:"env"`
	Tools       toolsSchema       `mapstructure:"tools"`
	Sandbox     sandboxSchema     `mapstructure:"sandbox"`
	Limits      limitsSchema      `mapstructure:"limits"`
	Rules       []ruleSchema      `mapstructure:"rules"`
	Escalations escalationsSchema `mapstructure:"escalations"`
	Files       filesSchema       `mapstructure:"files"`
	Tests       []testSchema      `mapstructure:"tests"`
}

type toolsSchema struct {
	Bash       *bool `mapstructure:"bash"`
	Pwsh       *bool `mapstructure:"pwsh"`
	Background *bool `mapstructure:"background"`
}

type sandboxSchema struct {
	Images       []string      `mapstructure:"images"`
	DefaultImage string        `mapstructure:"defaultImage"`
	Runtime      string        `mapstructure:"runtime"`
	CPUs         float64       `mapstructure:"cpus"`
	TenantCPUs   float64       `mapstructure:"tenantCpus"`
	Memory       Bytes         `mapstructure:"memory"`
	Pids         int64         `mapstructure:"pids"`
	Disk         Bytes         `mapstructure:"disk"`
	Tmp          Bytes         `mapstructure:"tmp"`
	Network      networkSchema `mapstructure:"network"`
	Mounts       []mountSchema `mapstructure:"mounts"`
	User         userSchema    `mapstructure:"user"`
	Pool         poolSchema    `mapstructure:"pool"`
	Suspend      string        `mapstructure:"suspend"`
}

type poolSchema struct {
	Size int `mapstructure:"size"`
}

type networkSchema struct {
	Allow       []string           `mapstructure:"allow"`
	Credentials []credentialSchema `mapstructure:"credentials"`
	HTTP        []httpRulesSchema  `mapstructure:"http"`
}

type httpRulesSchema struct {
	Hosts   []string `mapstructure:"hosts"`
	Rules   []string `mapstructure:"rules"`
	Default string   `mapstructure:"default"`
}

type credentialSchema struct {
	Name        string   `mapstructure:"name"`
	Hosts       []string `mapstructure:"hosts"`
	Header      string   `mapstructure:"header"`
	Value       string   `mapstructure:"value"`
	Placeholder string   `mapstructure:"placeholder"`
	GrantedOnly bool     `mapstructure:"grantedOnly"`
}

type mountSchema struct {
	Source   string `mapstructure:"source"`
	Target   string `mapstructure:"target"`
	ReadOnly *bool  `mapstructure:"readOnly"`
}

type userSchema struct {
	UID int `mapstructure:"uid"`
	GID int `mapstructure:"gid"`
}

type limitsSchema struct {
	DefaultTimeout  time.Duration `mapstructure:"defaultTimeout"`
	MaxTimeout      time.Duration `mapstructure:"maxTimeout"`
	Grace           time.Duration `mapstructure:"grace"`
	TailBytes       Bytes         `mapstructure:"tailBytes"`
	BufferBytes     Bytes         `mapstructure:"bufferBytes"`
	SpillLimit      Bytes         `mapstructure:"spillLimit"`
	SpillBytes      Bytes         `mapstructure:"spillBytes"`
	BackgroundTasks int           `mapstructure:"backgroundTasks"`
	Sessions        int           `mapstructure:"sessions"`
	IdleTTL         time.Duration `mapstructure:"idleTTL"`
	SuspendedTTL    time.Duration `mapstructure:"suspendedTTL"`
	SnapshotEvery   time.Duration `mapstructure:"snapshotEvery"`
	// CPUSecondsPerDay and SandboxHoursPerDay are the tenant's daily
	// usage limits (UTC days); 0 is none.
	CPUSecondsPerDay   float64 `mapstructure:"cpuSecondsPerDay"`
	SandboxHoursPerDay float64 `mapstructure:"sandboxHoursPerDay"`
}

type ruleSchema struct {
	Name     string         `mapstructure:"name"`
	Decision string         `mapstructure:"decision"`
	Reason   string         `mapstructure:"reason"`
	Match    matchSchema    `mapstructure:"match"`
	Examples examplesSchema `mapstructure:"examples"`
}

type matchSchema struct {
	Command    []string `mapstructure:"command"`
	Prefix     []string `mapstructure:"prefix"`
	Args       []string `mapstructure:"args"`
	ArgsRegex  []string `mapstructure:"argsRegex"`
	Redirect   []string `mapstructure:"redirect"`
	Workdir    []string `mapstructure:"workdir"`
	Tool       []string `mapstructure:"tool"`
	Background *bool    `mapstructure:"background"`
	Text       string   `mapstructure:"text"`
}

type examplesSchema struct {
	Match    []string `mapstructure:"match"`
	NotMatch []string `mapstructure:"not_match"`
}

type escalationsSchema struct {
	Default string             `mapstructure:"default"`
	Rules   []escalationSchema `mapstructure:"rules"`
}

type escalationSchema struct {
	Name        string   `mapstructure:"name"`
	Permissions []string `mapstructure:"permissions"`
	Decision    string   `mapstructure:"decision"`
	Reason      string   `mapstructure:"reason"`
}

type testSchema struct {
	Command     string   `mapstructure:"command"`
	Tool        string   `mapstructure:"tool"`
	Workdir     string   `mapstructure:"workdir"`
	Background  bool     `mapstructure:"background"`
	Permissions []string `mapstructure:"permissions"`
	Decision    string   `mapstructure:"decision"`
}

// Bytes is a size in a policy file: a plain number of bytes, or a number
// with a unit (KiB, MiB, GiB, TiB; KB, MB, GB, TB), such as "512MiB".
type Bytes int64

var byteUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1},
}

// ParseBytes parses a size as policy files write it.
func ParseBytes(s string) (Bytes, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range byteUnits {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a size (want bytes, or a number with KiB, MiB, GiB, TiB, KB, MB, GB or TB)", s)
	}
	if n > 0 && mult > (1<<62)/n {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return Bytes(n * mult), nil
}

var (
	bytesType    = reflect.TypeFor[Bytes]()
	durationType = reflect.TypeFor[time.Duration]()
)

// decodeHook turns the strings of a file into Bytes and durations. It runs
// under viper's decoder with weak typing off, so anything else must already
// have its type (checkNode has said so, with a line number).
func decodeHook(from, to reflect.Type, data any) (any, error) {
	s, ok := data.(string)
	if !ok {
		return data, nil
	}
	switch to {
	case bytesType:
		return ParseBytes(s)
	case durationType:
		return time.ParseDuration(s)
	}
	return data, nil
}

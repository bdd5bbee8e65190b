package sandbox

import (
	"reflect"
	"slices"
	"testing"
)

// goldenSpec sets every field of Spec to something not its default.
func goldenSpec() Spec {
	s := DefaultSpec("acme", "sess-1")
	s.Owner = "replica-a"
	s.Image = "shellbox-test:1"
	s.Runtime = "runsc"
	s.CPUs = 1.5
	s.MemoryBytes = 3 << 30
	s.PidsLimit = 77
	s.WorkspaceBytes = 1 << 30
	s.TmpBytes = 2 << 20
	s.SpillBytes = 5 << 20
	s.Network = "egress"
	s.UID, s.GID = 1001, 1002
	s.Env = []string{"A=1", "B=2"}
	s.Labels = map[string]string{"x": "1", "a": "2"}
	s.AgentArgs = []string{"--verbose"}
	s.Mounts = []Mount{{Source: "/srv/data", Root: "/srv", Target: "/data", ReadOnly: true}}
	s.Settings = `{"image":"x"}`
	return s
}

// The hashes of the release before confine.Resources (4adf863), computed
// by its TemplateHash: a warm pool filled by that release is claimed by
// this one, and during a rolling update both fill the same pools.
func TestTemplateHashOfEarlierReleases(t *testing.T) {
	for name, c := range map[string]struct {
		spec Spec
		want string
	}{
		"default":         {DefaultSpec("acme", "s"), "328916b1f9f9fbdb"},
		"every field set": {goldenSpec(), "adb68550093bd2a1"},
	} {
		if got := TemplateHash(c.spec); got != c.want {
			t.Errorf("%s: TemplateHash = %s, want %s (the hash of earlier releases)", name, got, c.want)
		}
	}
}

// A template with a tenant quota hashes apart from the same without one,
// and by its value.
func TestTemplateHashTenantCPUs(t *testing.T) {
	plain := goldenSpec()
	one, two := goldenSpec(), goldenSpec()
	one.TenantCPUs, two.TenantCPUs = 2, 3
	h := []string{TemplateHash(plain), TemplateHash(one), TemplateHash(two)}
	if h[0] == h[1] || h[1] == h[2] || h[0] == h[2] {
		t.Errorf("TemplateHash of no tenant quota, 2 and 3 cores: %v, want three hashes", h)
	}
}

// Every field of Spec (those of confine.Resources included) is in
// templateKey: a setting the hash left out would let a session claim a
// pooled sandbox that differs from its Spec in it.
func TestTemplateKeyCoversSpec(t *testing.T) {
	var spec []string
	var walk func(reflect.Type)
	walk = func(ty reflect.Type) {
		for f := range ty.Fields() {
			if f.Anonymous && f.Type.Kind() == reflect.Struct {
				walk(f.Type)
				continue
			}
			spec = append(spec, f.Name+" "+f.Type.String())
		}
	}
	walk(reflect.TypeFor[Spec]())
	var key []string
	for f := range reflect.TypeOf(templateKey(Spec{})).Fields() {
		key = append(key, f.Name+" "+f.Type.String())
	}
	// TenantCPUs, added after the layout froze, is in the key of the
	// specs that set it (and only theirs: the others' hashes hold).
	var withTenant Spec
	withTenant.TenantCPUs = 2
	for f := range reflect.TypeOf(templateKey(withTenant)).Fields() {
		if f.Name == "TenantCPUs" {
			key = append(key, f.Name+" "+f.Type.String())
		}
	}
	slices.Sort(spec)
	slices.Sort(key)
	if !slices.Equal(spec, key) {
		t.Errorf("templateKey's fields are not Spec's:\n Spec:        %v\n templateKey: %v\nadd the new field to templateKey (at its end)", spec, key)
	}
	// Each field reaches the hash: changing any one changes it.
	base := TemplateHash(goldenSpec())
	v := reflect.ValueOf(templateKey(goldenSpec()))
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		if name == "Session" || name == "Owner" || name == "Settings" {
			continue // not settings: TemplateHash clears them
		}
		s := goldenSpec()
		f := reflect.ValueOf(&s).Elem().FieldByName(name)
		f.Set(reflect.Zero(f.Type()))
		if TemplateHash(s) == base {
			t.Errorf("zeroing %s left TemplateHash unchanged", name)
		}
	}
}

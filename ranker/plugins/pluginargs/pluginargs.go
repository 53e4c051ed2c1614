// Package pluginargs decodes the args of sextant's scheduler plugins strictly.
//
// kube-scheduler hands a plugin whose args type it does not know the profile's args as
// raw JSON (runtime.Unknown), and its own DecodeInto reads them with encoding/json: a
// mistyped field name is silently ignored and the plugin runs on its defaults. Here an
// unknown or repeated field is an error that names it, so the ranker refuses to start
// with a configuration that does not say what its author meant.
package pluginargs

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Decode reads the profile's args of plugin name from obj into into (a pointer to the
// plugin's args struct, already holding its defaults). A nil obj, or one without
// content, leaves into as it is.
func Decode(name string, obj runtime.Object, into any) error {
	raw, err := rawJSON(obj)
	if err != nil || raw == nil {
		return wrap(name, err)
	}
	strict, err := json.UnmarshalStrict(raw, into)
	if err != nil {
		return wrap(name, err)
	}
	return wrap(name, errors.Join(strict...))
}

// None refuses args for plugin name, which takes none: args given to it were meant
// for another plugin, or for a version that had them.
func None(name string, obj runtime.Object) error {
	raw, err := rawJSON(obj)
	if err != nil {
		return wrap(name, err)
	}
	if raw == nil {
		return nil
	}
	var fields map[string]any
	if err := json.UnmarshalCaseSensitivePreserveInts(raw, &fields); err != nil {
		return wrap(name, err)
	}
	for field := range fields {
		if field == "kind" || field == "apiVersion" {
			continue
		}
		return fmt.Errorf("%s args: unknown field %q: the plugin takes no args", name, field)
	}
	return nil
}

func wrap(name string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("decode %s args: %w", name, err)
}

// rawJSON returns obj's content as JSON, nil when there is none.
func rawJSON(obj runtime.Object) ([]byte, error) {
	if obj == nil {
		return nil, nil
	}
	u, ok := obj.(*runtime.Unknown)
	if !ok {
		return nil, fmt.Errorf("want args of type runtime.Unknown, got %T", obj)
	}
	if len(u.Raw) == 0 {
		return nil, nil
	}
	switch u.ContentType {
	case runtime.ContentTypeJSON, "":
		return u.Raw, nil
	case runtime.ContentTypeYAML:
		raw, err := yaml.YAMLToJSON(u.Raw)
		if err != nil {
			return nil, fmt.Errorf("args are not valid YAML: %w", err)
		}
		return raw, nil
	}
	return nil, fmt.Errorf("args of content type %q; want JSON or YAML", u.ContentType)
}

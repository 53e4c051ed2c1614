// Package pluginargs decodes the args of sextant's scheduler plugins strictly.
//
// kube-scheduler hands a plugin whose args type it does not know the profile's args as
// raw JSON (runtime.Unknown), and its own DecodeInto reads them with encoding/json: a
// mistyped field name is silently ignored and the plugin runs on its defaults. Here an
// unknown or repeated field is an error that names it, so the ranker refuses to start
// with a configuration that does not say what its author meant.
package pluginargs

import (
	stdjson "encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
		return wrap(name, fieldError(raw, into, err))
	}
	return wrap(name, errors.Join(strict...))
}

// fieldError names the field of raw that does not decode into a value of into's type,
// with its value: encoding/json passes a field's own UnmarshalJSON error (a
// metav1.Duration's "time: invalid duration") on without saying which field it was.
// It returns err as it is when no single field fails alone.
func fieldError(raw []byte, into any, err error) error {
	ptr := reflect.TypeOf(into)
	var fields map[string]stdjson.RawMessage
	if ptr == nil || ptr.Kind() != reflect.Pointer || stdjson.Unmarshal(raw, &fields) != nil {
		return err
	}
	t := ptr.Elem()
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		one, merr := stdjson.Marshal(map[string]stdjson.RawMessage{name: fields[name]})
		if merr != nil {
			continue
		}
		ferr := json.UnmarshalCaseSensitivePreserveInts(one, reflect.New(t).Interface())
		if ferr == nil {
			continue
		}
		if isDuration(t, name) {
			return fmt.Errorf("%s: %s: %w; want a duration such as 60s or 2m30s", name, fields[name], ferr)
		}
		return fmt.Errorf("%s: %s: %w", name, fields[name], ferr)
	}
	return err
}

// isDuration reports whether struct type t's field of JSON name name is a metav1.Duration.
func isDuration(t reflect.Type, name string) bool {
	if t.Kind() != reflect.Struct {
		return false
	}
	for f := range t.Fields() {
		if tag, _, _ := strings.Cut(f.Tag.Get("json"), ","); tag == name {
			return f.Type == reflect.TypeFor[metav1.Duration]()
		}
	}
	return false
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

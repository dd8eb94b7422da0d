package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// ParseError is a manifest that cannot be read: the file (or chart
// template) and the line where the problem is.
type ParseError struct {
	// File names the manifest: a path relative to the source, or a chart
	// template's name.
	File string
	// Line is 1-based; 0 when the problem has no single line.
	Line int
	Err  error
}

func (e *ParseError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.File, e.Err)
}

func (e *ParseError) Unwrap() error { return e.Err }

// ParseManifests reads the YAML (or JSON) documents of one file into
// objects (pure). Empty documents are skipped; a v1 List is expanded into
// its items. Every object must have apiVersion, kind and metadata.name;
// errors name the file and the line.
func ParseManifests(file string, data []byte) ([]*unstructured.Unstructured, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var out []*unstructured.Unstructured
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, yamlError(file, err)
		}
		if len(doc.Content) == 0 || doc.Content[0].Tag == "!!null" {
			continue
		}
		root := doc.Content[0]
		if root.Kind != yaml.MappingNode {
			return nil, &ParseError{File: file, Line: root.Line, Err: errors.New("a manifest must be a mapping with apiVersion, kind and metadata")}
		}
		var m map[string]any
		if err := root.Decode(&m); err != nil {
			return nil, &ParseError{File: file, Line: root.Line, Err: err}
		}
		objs, err := toObjects(m)
		if err != nil {
			return nil, &ParseError{File: file, Line: root.Line, Err: err}
		}
		out = append(out, objs...)
	}
}

// yamlError turns the YAML library's "yaml: line N: msg" into a ParseError
// with the line as a field.
func yamlError(file string, err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	var line int
	if n, _ := fmt.Sscanf(msg, "line %d:", &line); n == 1 {
		msg = strings.TrimSpace(msg[strings.Index(msg, ":")+1:])
	}
	return &ParseError{File: file, Line: line, Err: errors.New("invalid YAML: " + msg)}
}

func toObjects(m map[string]any) ([]*unstructured.Unstructured, error) {
	data, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(data); err != nil {
		return nil, objectError(m, err)
	}
	if u.IsList() {
		list, err := u.ToList()
		if err != nil {
			return nil, err
		}
		var out []*unstructured.Unstructured
		for i := range list.Items {
			if err := checkObject(&list.Items[i]); err != nil {
				return nil, fmt.Errorf("item %d: %w", i, err)
			}
			out = append(out, &list.Items[i])
		}
		return out, nil
	}
	if err := checkObject(u); err != nil {
		return nil, err
	}
	return []*unstructured.Unstructured{u}, nil
}

// objectError words the decoder's complaints about a missing kind or
// apiVersion as a user would fix them.
func objectError(m map[string]any, err error) error {
	if _, ok := m["kind"]; !ok {
		return errors.New("object has no kind")
	}
	if _, ok := m["apiVersion"]; !ok {
		return errors.New("object has no apiVersion")
	}
	return err
}

func checkObject(u *unstructured.Unstructured) error {
	switch {
	case u.GetAPIVersion() == "":
		return fmt.Errorf("%s has no apiVersion", u.GetKind())
	case u.GetKind() == "":
		return errors.New("object has no kind")
	case u.GetName() == "" && u.GetGenerateName() == "":
		return fmt.Errorf("%s has no metadata.name", u.GetKind())
	case u.GetName() == "":
		return fmt.Errorf("%s %s*: generateName cannot be applied (server-side apply needs a name)", u.GetKind(), u.GetGenerateName())
	}
	return nil
}

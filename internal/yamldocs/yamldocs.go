// Package yamldocs splits a multi-document YAML stream (manifests, helm
// template's output) into its documents by YAML's own rules: a "---"
// line, with or without a comment after it, at the start or at the end,
// and CRLF line ends, which a split on "\n---\n" gets wrong.
package yamldocs

import (
	"bufio"
	"bytes"
	"errors"
	"io"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Split returns the documents of b, those with nothing but blank space
// left out (comment-only ones are kept: the caller decides).
func Split(b []byte) ([][]byte, error) {
	var docs [][]byte
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		doc = dropMarker(doc)
		if len(bytes.TrimSpace(doc)) > 0 {
			docs = append(docs, doc)
		}
	}
}

// dropMarker removes the "---" line the reader leaves at the start of a
// stream's first document.
func dropMarker(doc []byte) []byte {
	line, rest, _ := bytes.Cut(doc, []byte("\n"))
	line = bytes.TrimRight(line, "\r")
	if bytes.Equal(line, []byte("---")) || bytes.HasPrefix(line, []byte("--- ")) {
		return rest
	}
	return doc
}

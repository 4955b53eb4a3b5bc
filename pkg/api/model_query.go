package api

import (
	"fmt"
	"net/url"
)

// ModelParam is the URL query parameter naming the model (domain) of a
// request sent as a binary body (ContentTypeSeqHashes), which has no
// field for it: POST /v1/match?model=llama. "domain" is its alias.
const ModelParam = "model"

// SplitModelQuery takes the model out of a URL query: the model (empty
// when none is given) and the query without it, for the route options.
// The model follows a JSON body's "model" rules: one of model or domain,
// once, 1 to MaxModelBytes bytes.
func SplitModelQuery(raw string) (model, rest string, err error) {
	if raw == "" {
		return "", "", nil
	}
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return "", "", &RequestError{Reason: "query: " + err.Error()}
	}
	key := ""
	for _, k := range []string{ModelParam, "domain"} {
		vs, ok := vals[k]
		if !ok {
			continue
		}
		if key != "" {
			return "", "", &RequestError{Field: k, Reason: "give one of model or domain"}
		}
		key = k
		if len(vs) != 1 {
			return "", "", &RequestError{Field: k, Reason: "given twice"}
		}
		if model = vs[0]; model == "" || len(model) > MaxModelBytes {
			return "", "", &RequestError{Field: k, Reason: fmt.Sprintf("must be 1..%d bytes", MaxModelBytes)}
		}
		delete(vals, k)
	}
	if key == "" {
		return "", raw, nil
	}
	return model, vals.Encode(), nil
}

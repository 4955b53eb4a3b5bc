package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/ckfrelay/ckfrelay/pkg/api"
	"github.com/ckfrelay/ckfrelay/pkg/client"
)

// A router asks which DC holds the longest cached prefix of a request and
// routes there; when no lane is ready it routes without the index.
func ExampleHTTP_Match() {
	// Stands in for a global-indexer at http://127.0.0.1:8080.
	indexer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"ready_lanes":2,"blocks":3,"lanes":[`+
			`{"lane":0,"dc":"dc-a","pool":"p-a","depth":1},{"lane":1,"dc":"dc-b","pool":"p-b","depth":3}],`+
			`"best":{"lane":1,"dc":"dc-b","pool":"p-b","depth":3}}`)
	}))
	defer indexer.Close()

	c, err := client.NewHTTP(indexer.URL, &http.Client{Timeout: time.Second})
	if err != nil {
		panic(err)
	}
	ans, err := c.Match(context.Background(), api.MatchRequest{Tokens: make([]uint32, 48), BlockSize: 16})
	switch {
	case errors.Is(err, client.ErrUnavailable):
		fmt.Println("no lane ready: route by load")
	case err != nil:
		fmt.Println("query failed:", err)
	case ans.Best == nil:
		fmt.Println("no DC holds any prefix")
	default:
		fmt.Printf("route to %s: %d of %d blocks cached\n", ans.Best.DC, ans.Best.Depth, ans.Blocks)
	}
	// Output: route to dc-b: 3 of 3 blocks cached
}

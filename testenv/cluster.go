package testenv

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ClusterName is the NATS cluster name of a Cluster's servers.
const ClusterName = "hub"

// clusterUpTimeout bounds the wait for the routes and the JetStream meta
// leader of a cluster.
const clusterUpTimeout = 30 * time.Second

// routeOpts are a cluster node's cluster listener and routes.
type routeOpts struct {
	port   int
	routes []*url.URL
	// advertise is where gossip about this node sends other nodes: a
	// closed port, so every route goes through the configured links.
	advertise string
}

func (r *routeOpts) apply(o *server.Options) {
	o.Cluster = server.ClusterOpts{Name: ClusterName, Host: "127.0.0.1", Port: r.port, Advertise: r.advertise, PoolSize: -1,
		// Clients keep the URLs they were given (the nodes' links).
		NoAdvertise: true}
	o.Routes = r.routes
}

// Cluster is n JetStream servers in one NATS cluster, as the clustered hub
// runs in production (docs/chaos.md): streams and buckets created with up
// to n replicas are raft groups over its nodes.
//
// Every connection to a node, from a client or from another node's route,
// goes through a Link of that node, so Kill takes a node away as kill -9
// does: its peers and clients lose their connections at once, and nothing
// it does on the way out (a graceful shutdown steps its raft leaders down
// and tells pull consumers) reaches them.
type Cluster struct {
	nodes   []*Server
	clients []*Link   // clients[i]: the client URL of node i
	routes  [][]*Link // routes[i][j]: node i's route to node j (nil for i == j)
}

// StartCluster starts n (2..5) servers named node-1..node-n that route to
// each other, and waits until every route is up and the JetStream meta
// group has a leader. opts apply to every node (e.g. WithDomain).
func StartCluster(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	if n < 2 || n > 5 {
		t.Fatalf("testenv: a cluster of %d servers, want 2..5", n)
	}
	ports := make([]int, n)
	for i := range ports {
		ports[i] = FreePort(t)
	}
	dead := fmt.Sprintf("127.0.0.1:%d", FreePort(t))
	c := &Cluster{routes: make([][]*Link, n)}
	for i := range n {
		c.routes[i] = make([]*Link, n)
		var urls []*url.URL
		for j := range n {
			if j == i {
				continue
			}
			l := NewLink(t, fmt.Sprintf("127.0.0.1:%d", ports[j]))
			c.routes[i][j] = l
			urls = append(urls, &url.URL{Scheme: "nats", Host: l.Addr()})
		}
		route := &routeOpts{port: ports[i], routes: urls, advertise: dead}
		s := startServer(t, route, append([]Option{WithName(fmt.Sprintf("node-%d", i+1))}, opts...)...)
		c.nodes = append(c.nodes, s)
		c.clients = append(c.clients, NewLink(t, fmt.Sprintf("127.0.0.1:%d", s.opts.Port)))
	}
	c.waitUp(t)
	return c
}

// waitUp waits until every live node routes to every other live node and
// the JetStream meta group has a leader.
func (c *Cluster) waitUp(t testing.TB) {
	t.Helper()
	Eventually(t, clusterUpTimeout, 10*time.Millisecond, func() error {
		live := c.live()
		leader := false
		for _, i := range live {
			s := c.nodes[i].NATS()
			if n := numRoutedPeers(s); n != len(live)-1 {
				return fmt.Errorf("%s routes to %d peers, want %d", s.Name(), n, len(live)-1)
			}
			leader = leader || s.JetStreamIsLeader()
		}
		if !leader {
			return errors.New("no JetStream meta leader")
		}
		return nil
	})
}

// numRoutedPeers counts the distinct servers s has a route to.
func numRoutedPeers(s *server.Server) int {
	rz, err := s.Routez(nil)
	if err != nil {
		return -1
	}
	peers := map[string]bool{}
	for _, r := range rz.Routes {
		peers[r.RemoteName] = true
	}
	return len(peers)
}

// live returns the indexes of the running nodes.
func (c *Cluster) live() []int {
	var live []int
	for i, s := range c.nodes {
		if s.NATS().Running() {
			live = append(live, i)
		}
	}
	return live
}

// index returns the index of the node named name; it fails the test for
// another name.
func (c *Cluster) index(t testing.TB, name string) int {
	t.Helper()
	for i, s := range c.nodes {
		if s.opts.ServerName == name {
			return i
		}
	}
	t.Fatalf("testenv: no cluster node %q", name)
	return -1
}

// Node returns the node named name (node-1..node-n).
func (c *Cluster) Node(t testing.TB, name string) *Server {
	t.Helper()
	return c.nodes[c.index(t, name)]
}

// URLs returns every node's client URL, comma-separated, as nats.Connect
// takes them: a client fails over to another node when its own dies.
func (c *Cluster) URLs() string {
	urls := make([]string, len(c.clients))
	for i, l := range c.clients {
		urls[i] = "nats://" + l.Addr()
	}
	return strings.Join(urls, ",")
}

// Connect opens a client connection to the cluster (a random node, failing
// over to the others) that reconnects quickly and is closed by t.Cleanup.
func (c *Cluster) Connect(t testing.TB, opts ...nats.Option) *nats.Conn {
	t.Helper()
	base := []nats.Option{
		nats.MaxReconnects(-1),
		nats.ReconnectWait(25 * time.Millisecond),
		nats.Timeout(5 * time.Second),
	}
	nc, err := nats.Connect(c.URLs(), append(base, opts...)...)
	if err != nil {
		t.Fatalf("testenv: connect %s: %v", c.URLs(), err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// JetStream opens a new connection (see Connect) and returns a JetStream
// context on it.
func (c *Cluster) JetStream(t testing.TB) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(c.Connect(t))
	if err != nil {
		t.Fatalf("testenv: jetstream: %v", err)
	}
	return js
}

// StreamLeader returns the name of the node leading stream ("" while it
// has none), as the stream's info says through js.
func StreamLeader(ctx context.Context, js jetstream.JetStream, stream string) (string, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return "", err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return "", err
	}
	if info.Cluster == nil {
		return "", fmt.Errorf("testenv: stream %s reports no cluster", stream)
	}
	return info.Cluster.Leader, nil
}

// Kill takes the node named name away as kill -9 would: every connection
// to and from it (clients and routes) is closed, then it is shut down
// behind its cut links. Restart brings it back.
func (c *Cluster) Kill(t testing.TB, name string) {
	t.Helper()
	i := c.index(t, name)
	c.setLinks(i, (*Link).Cut)
	c.nodes[i].Shutdown()
}

// Restart starts a killed node again with its store and reconnects it,
// then waits until every route is up and the meta group has a leader.
func (c *Cluster) Restart(t testing.TB, name string) {
	t.Helper()
	i := c.index(t, name)
	c.nodes[i].Restart(t)
	c.setLinks(i, (*Link).Heal)
	c.waitUp(t)
}

// setLinks applies f to node i's client link and every route link to or
// from it.
func (c *Cluster) setLinks(i int, f func(*Link)) {
	f(c.clients[i])
	for j := range c.nodes {
		if j != i {
			f(c.routes[i][j])
			f(c.routes[j][i])
		}
	}
}

package sim

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
)

// Instance is one simulated machine.
type Instance struct {
	ID           string              `json:"id"`
	NodeClaim    string              `json:"nodeClaim"`
	NodeClass    string              `json:"nodeClass"`
	InstanceType string              `json:"instanceType"`
	Zone         string              `json:"zone"`
	CapacityType string              `json:"capacityType"`
	Price        float64             `json:"price"`
	ImageID      string              `json:"imageID"`
	Labels       map[string]string   `json:"labels"`
	Taints       []corev1.Taint      `json:"taints,omitempty"`
	Capacity     corev1.ResourceList `json:"capacity"`
	Allocatable  corev1.ResourceList `json:"allocatable"`
	LaunchedAt   time.Time           `json:"launchedAt"`
	// RegisterAt is when the machine creates its Node; zero when it never will.
	RegisterAt time.Time `json:"registerAt"`
	Registered bool      `json:"registered"`
}

// ProviderID is the instance's provider ID: sim:///<zone>/<id>.
func (i *Instance) ProviderID() string { return fmt.Sprintf("sim:///%s/%s", i.Zone, i.ID) }

// Cloud holds the simulated machines. It is safe for concurrent use.
type Cloud struct {
	clock clock.PassiveClock
	path  string

	mu    sync.Mutex
	state cloudState
}

type cloudState struct {
	NextID    int                  `json:"nextID"`
	Instances map[string]*Instance `json:"instances"`
	// ByClaim maps a NodeClaim name to its instance: the idempotency key of Create.
	ByClaim map[string]string `json:"byClaim"`
	// Creates counts the machines launched per NodeClaim, for tests of idempotency.
	Creates map[string]int `json:"creates"`
}

// NewCloud returns a cloud; when path is not empty its state is loaded from and saved to that
// file, so that a restarted controller sees the machines it launched.
func NewCloud(c clock.PassiveClock, path string) (*Cloud, error) {
	cl := &Cloud{clock: c, path: path, state: cloudState{Instances: map[string]*Instance{}, ByClaim: map[string]string{}, Creates: map[string]int{}}}
	if path == "" {
		return cl, nil
	}
	b, err := os.ReadFile(path)
	switch {
	case os.IsNotExist(err):
		return cl, nil
	case err != nil:
		return nil, fmt.Errorf("reading simulated cloud state: %w", err)
	}
	if err := json.Unmarshal(b, &cl.state); err != nil {
		return nil, fmt.Errorf("decoding simulated cloud state %s: %w", path, err)
	}
	return cl, nil
}

// save persists the state; callers hold mu.
func (c *Cloud) save() error {
	if c.path == "" {
		return nil
	}
	b, err := json.Marshal(&c.state)
	if err != nil {
		return fmt.Errorf("encoding simulated cloud state: %w", err)
	}
	tmp := c.path + ".tmp"
	if err := os.MkdirAll(filepath.Dir(c.path), 0o755); err != nil {
		return fmt.Errorf("saving simulated cloud state: %w", err)
	}
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("saving simulated cloud state: %w", err)
	}
	if err := os.Rename(tmp, c.path); err != nil {
		return fmt.Errorf("saving simulated cloud state: %w", err)
	}
	return nil
}

// launch records a new instance for a NodeClaim unless one exists; it returns the instance.
func (c *Cloud) launch(claim string, mk func(id string) *Instance) (*Instance, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if id, ok := c.state.ByClaim[claim]; ok {
		if inst, ok := c.state.Instances[id]; ok {
			return inst, nil
		}
	}
	c.state.NextID++
	inst := mk(fmt.Sprintf("i-%017x", c.state.NextID))
	c.state.Instances[inst.ID] = inst
	c.state.ByClaim[claim] = inst.ID
	c.state.Creates[claim]++
	return inst, c.save()
}

// existing returns the instance launched for a NodeClaim, if any.
func (c *Cloud) existing(claim string) (*Instance, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id, ok := c.state.ByClaim[claim]
	if !ok {
		return nil, false
	}
	inst, ok := c.state.Instances[id]
	return inst, ok
}

// Get returns an instance by ID.
func (c *Cloud) Get(id string) (*Instance, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	inst, ok := c.state.Instances[id]
	return inst, ok
}

// Terminate removes an instance; it reports whether it existed.
func (c *Cloud) Terminate(id string) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	inst, ok := c.state.Instances[id]
	if !ok {
		return false, nil
	}
	delete(c.state.Instances, id)
	if c.state.ByClaim[inst.NodeClaim] == id {
		delete(c.state.ByClaim, inst.NodeClaim)
	}
	return true, c.save()
}

// Instances returns the running instances, ordered by ID.
func (c *Cloud) Instances() []*Instance {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*Instance, 0, len(c.state.Instances))
	for _, inst := range c.state.Instances {
		cp := *inst
		out = append(out, &cp)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// CreateCount is how many machines were launched for a NodeClaim.
func (c *Cloud) CreateCount(claim string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state.Creates[claim]
}

// dueForRegistration returns the instances whose Node should exist by now and marks them so.
func (c *Cloud) dueForRegistration() ([]*Instance, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	var due []*Instance
	for _, inst := range c.state.Instances {
		if inst.Registered || inst.RegisterAt.IsZero() || now.Before(inst.RegisterAt) {
			continue
		}
		cp := *inst
		due = append(due, &cp)
	}
	sort.Slice(due, func(i, j int) bool { return due[i].ID < due[j].ID })
	return due, nil
}

// markRegistered records that the instance's Node was created.
func (c *Cloud) markRegistered(id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if inst, ok := c.state.Instances[id]; ok {
		inst.Registered = true
	}
	return c.save()
}

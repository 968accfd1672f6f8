package sim

import (
	"errors"
	"fmt"
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
	// ReservationID is the capacity reservation the machine was launched into, if any.
	ReservationID string `json:"reservationID,omitempty"`
	// RegisterAt is when the machine creates its Node; zero when it never will.
	RegisterAt time.Time `json:"registerAt"`
	Registered bool      `json:"registered"`
}

// ProviderID is the instance's provider ID: sim:///<zone>/<id>.
func (i *Instance) ProviderID() string { return fmt.Sprintf("sim:///%s/%s", i.Zone, i.ID) }

// Cloud holds the simulated machines. It is safe for concurrent use. Its state lives in a
// Store (a file, ConfigMaps in the cluster, or only memory) and is loaded on first use, so the
// replica that becomes leader sees every machine its predecessor launched.
type Cloud struct {
	clock clock.PassiveClock
	store Store

	mu     sync.Mutex
	loaded bool
	state  cloudState
}

type cloudState struct {
	NextID    int                  `json:"nextID"`
	Instances map[string]*Instance `json:"instances"`
	// ByClaim maps a NodeClaim name to its instance: the idempotency key of Create.
	ByClaim map[string]string `json:"byClaim"`
	// Creates counts the machines launched per NodeClaim, for tests of idempotency.
	Creates map[string]int `json:"creates"`
}

// NewCloud returns a cloud; when path is not empty its state is kept in that file (FileStore),
// otherwise only in memory.
func NewCloud(c clock.PassiveClock, path string) (*Cloud, error) {
	var store Store
	if path != "" {
		store = &FileStore{Path: path}
	}
	cl := NewCloudWithStore(c, store)
	if err := cl.Load(); err != nil {
		return nil, err
	}
	return cl, nil
}

// NewCloudWithStore returns a cloud keeping its machines in store (nil: memory only). The state
// is loaded on first use.
func NewCloudWithStore(c clock.PassiveClock, store Store) *Cloud {
	return &Cloud{clock: c, store: store, state: cloudState{Instances: map[string]*Instance{}, ByClaim: map[string]string{}, Creates: map[string]int{}}}
}

// Load reads the machines from the store unless they were read already. Every use of the cloud
// calls it; an error (the store unreachable) is returned and the next use tries again.
func (c *Cloud) Load() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.loadLocked()
}

func (c *Cloud) loadLocked() error {
	if c.loaded || c.store == nil {
		c.loaded = true
		return nil
	}
	insts, err := c.store.Load()
	if err != nil {
		return fmt.Errorf("loading the simulated cloud's machines: %w", err)
	}
	for _, inst := range insts {
		c.state.Instances[inst.ID] = inst
		c.state.ByClaim[inst.NodeClaim] = inst.ID
		var n int
		if _, err := fmt.Sscanf(inst.ID, "i-%x", &n); err == nil && n > c.state.NextID {
			c.state.NextID = n
		}
	}
	c.loaded = true
	return nil
}

// put persists an instance; callers hold mu.
func (c *Cloud) put(inst *Instance) error {
	if c.store == nil {
		return nil
	}
	return c.store.Put(inst)
}

// errFull is launch's answer when a capacity it must join is full: a capacity reservation that
// holds as many machines as it may (EC2's ReservationCapacityExceeded), or an offering short of
// machines (InsufficientInstanceCapacity).
var errFull = errors.New("no machine left")

// capacity bounds the machines a launch may join: at most max running instances that in
// selects.
type capacity struct {
	in  func(*Instance) bool
	max int
}

// launch records a new instance for a NodeClaim unless one exists; it returns the instance. The
// instance is persisted before it is known in memory, so a failed write launches nothing. A
// launch that one of caps finds full fails with errFull: the count and the launch are one step
// under the cloud's lock.
func (c *Cloud) launch(claim string, caps []capacity, mk func(id string) *Instance) (*Instance, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.loadLocked(); err != nil {
		return nil, err
	}
	if id, ok := c.state.ByClaim[claim]; ok {
		if inst, ok := c.state.Instances[id]; ok {
			return inst, nil
		}
	}
	for _, cp := range caps {
		n := 0
		for _, inst := range c.state.Instances {
			if cp.in(inst) {
				n++
			}
		}
		if n >= cp.max {
			return nil, errFull
		}
	}
	inst := mk(fmt.Sprintf("i-%017x", c.state.NextID+1))
	if err := c.put(inst); err != nil {
		return nil, fmt.Errorf("recording instance %s: %w", inst.ID, err)
	}
	c.state.NextID++
	c.state.Instances[inst.ID] = inst
	c.state.ByClaim[claim] = inst.ID
	c.state.Creates[claim]++
	return inst, nil
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
	if err := c.loadLocked(); err != nil {
		return false, err
	}
	inst, ok := c.state.Instances[id]
	if !ok {
		return false, nil
	}
	if c.store != nil {
		if err := c.store.Delete(id); err != nil {
			return false, fmt.Errorf("removing instance %s: %w", id, err)
		}
	}
	delete(c.state.Instances, id)
	if c.state.ByClaim[inst.NodeClaim] == id {
		delete(c.state.ByClaim, inst.NodeClaim)
	}
	return true, nil
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

// InReservation is how many machines run in a capacity reservation.
func (c *Cloud) InReservation(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, inst := range c.state.Instances {
		if inst.ReservationID == id {
			n++
		}
	}
	return n
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
	if err := c.loadLocked(); err != nil {
		return nil, err
	}
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
	inst, ok := c.state.Instances[id]
	if !ok || inst.Registered {
		return nil
	}
	updated := *inst
	updated.Registered = true
	if err := c.put(&updated); err != nil {
		return fmt.Errorf("recording the registration of instance %s: %w", id, err)
	}
	*inst = updated
	return nil
}

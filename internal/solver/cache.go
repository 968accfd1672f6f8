package solver

import (
	"maps"
	"reflect"
	"slices"
	"sync"
	"unsafe"

	corev1 "k8s.io/api/core/v1"

	"capstan.dev/capstan/internal/cloudprovider"
)

// Cache carries from one Solve to the next what depends only on inputs that are the same values
// each time: the instance types each NodePool admits, with their prices and capacities, and the
// resource vectors of the existing nodes' allocatable and requested resources. A caller that
// solves many times over the same NodePools and nodes — the disruption core, which simulates
// many removals within one decision — shares one through Options.Cache and saves most of each
// Solve's preparation; the plans are the same as without it.
//
// A Cache recognises its inputs by identity: a resource list by its map, a NodePool by its name,
// its InstanceTypes slice and the Input's WellKnownLabels slice. So the inputs it has seen must
// not be modified while it is in use, and two NodePools with the same name and instance-type
// slice must have the same requirements and offerings. It is safe for concurrent Solves.
type Cache struct {
	mu sync.Mutex
	// ri only grows: every Solve registers its resources here and works on a copy, so a
	// resource keeps its position and a vector made for one Solve serves the next (a name
	// registered later is a zero the vector leaves out).
	ri    *resourceIndex
	vecs  map[unsafe.Pointer]*cachedVec
	seen  map[*cloudprovider.InstanceType]bool
	pools map[poolKey]*poolEntry
}

// NewCache returns an empty Cache.
func NewCache() *Cache {
	return &Cache{ri: newResourceIndex(), vecs: map[unsafe.Pointer]*cachedVec{},
		seen: map[*cloudprovider.InstanceType]bool{}, pools: map[poolKey]*poolEntry{}}
}

type cachedVec struct {
	// rl keeps the map alive, so that no other map takes its address while the entry stands.
	rl corev1.ResourceList
	v  vec
	// ports, for a node's Requested list, are the host ports of the pods it sums.
	ports      []hostPort
	portsKnown bool
}

// poolKey names a NodePool's admitted types: its name, its instance-type slice and the input's
// well-known labels (which decide the keys a type must define).
type poolKey struct {
	name      string
	types     **cloudprovider.InstanceType
	n         int
	wellKnown *string
}

// poolEntry is what the Cache keeps of a NodePool: its offerings' zones and capacity types in
// order of first appearance, and the types it admits (made on first use).
type poolEntry struct {
	// pinned and wellKnown keep the key's slices alive, so that no other slice takes their
	// addresses while the entry stands.
	pinned     []*cloudprovider.InstanceType
	wellKnown  []string
	zones, cts []string
	types      *poolTypes
}

// poolTypes are the types a NodePool admits, cheapest first, as newPool filters them, with what
// each Solve would compute of them again.
type poolTypes struct {
	// zones and cts are the offering index the templates' masks were made with.
	zones, cts []string
	indexed    bool
	list       []typeTemplate
}

type typeTemplate struct {
	it *cloudprovider.InstanceType
	// price is the cheapest offering the pool allows, without the pool's NodeCost.
	price float64
	// capacity, and alloc (capacity less overhead), at the Cache's resource index.
	capacity, alloc vec
	offMask         uint64
	offPrice        []float64
}

func mapKey(rl corev1.ResourceList) unsafe.Pointer {
	return reflect.ValueOf(rl).UnsafePointer()
}

// index registers, under the lock, what register adds to the Cache's resource index and
// returns a copy for one Solve. known says whether a list's names are registered already (it
// has a vector); seenType whether a type's capacity is.
func (c *Cache) index(register func(ri *resourceIndex, known func(corev1.ResourceList) bool, seenType func(*cloudprovider.InstanceType) bool)) *resourceIndex {
	c.mu.Lock()
	defer c.mu.Unlock()
	register(c.ri, func(rl corev1.ResourceList) bool {
		_, ok := c.vecs[mapKey(rl)]
		return ok
	}, func(it *cloudprovider.InstanceType) bool {
		if c.seen[it] {
			return true
		}
		c.seen[it] = true
		return false
	})
	return &resourceIndex{pos: maps.Clone(c.ri.pos), names: slices.Clone(c.ri.names)}
}

// vecLocked returns the entry of ri.vec(rl), made once per list; c.mu is held. The entry and
// its vector are read-only, except for ports.
func (c *Cache) vecLocked(rl corev1.ResourceList, ri *resourceIndex) *cachedVec {
	if rl == nil {
		return &cachedVec{v: make(vec, ri.len())}
	}
	key := mapKey(rl)
	e, ok := c.vecs[key]
	if !ok || len(e.v) < ri.len() {
		// Made anew when the index grew since: the list may hold a name registered later.
		if !ok {
			e = &cachedVec{rl: rl}
			c.vecs[key] = e
		}
		e.v = ri.vec(rl)
	}
	if len(e.v) == ri.len() {
		return e
	}
	// A longer vector was made for a Solve that copied the index after this one: every name
	// this Solve knows has the same position in both, and the names past its end it does not.
	return &cachedVec{rl: rl, v: e.v[:ri.len():ri.len()], ports: e.ports, portsKnown: e.portsKnown}
}

// entryLocked returns the NodePool's entry, making it (with its offering order) on first use;
// c.mu is held.
func (c *Cache) entryLocked(np *NodePool, in *Input) *poolEntry {
	key := poolKey{name: np.Name, types: unsafe.SliceData(np.InstanceTypes), n: len(np.InstanceTypes),
		wellKnown: unsafe.SliceData(in.WellKnownLabels)}
	e, ok := c.pools[key]
	if !ok {
		e = &poolEntry{pinned: np.InstanceTypes, wellKnown: in.WellKnownLabels}
		e.zones, e.cts = offeringKeys(np.InstanceTypes)
		c.pools[key] = e
	}
	return e
}

// offeringKeys is offeringKeys(np.InstanceTypes), made once per pool.
func (c *Cache) offeringKeys(np *NodePool, in *Input) (zones, cts []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entryLocked(np, in)
	return e.zones, e.cts
}

// poolTypes returns the NodePool's admitted types, computing them with make on first use.
func (c *Cache) poolTypes(np *NodePool, in *Input, make func() *poolTypes) *poolTypes {
	c.mu.Lock()
	e := c.entryLocked(np, in)
	pt := e.types
	c.mu.Unlock()
	if pt != nil {
		return pt
	}
	pt = make()
	c.mu.Lock()
	e.types = pt
	c.mu.Unlock()
	return pt
}

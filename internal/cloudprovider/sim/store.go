package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Store keeps the simulated cloud's machines outside the process, so they survive a restart of
// Capstan and a change of leader, as a real cloud's would.
type Store interface {
	// Load returns every machine.
	Load() ([]*Instance, error)
	// Put records a machine, new or changed.
	Put(*Instance) error
	// Delete forgets a machine; deleting one that is not there is not an error.
	Delete(id string) error
}

// FileStore keeps the machines in one JSON file, rewritten atomically on each change. The file
// also counts the machines ever launched per NodeClaim ("creates"), as a cloud's audit log would,
// so tests can check that no claim bought two across restarts.
type FileStore struct {
	Path string

	mu        sync.Mutex
	instances map[string]*Instance
	creates   map[string]int
}

var _ Store = (*FileStore)(nil)

type fileState struct {
	Instances map[string]*Instance `json:"instances"`
	Creates   map[string]int       `json:"creates,omitempty"`
}

// Load implements Store.
func (f *FileStore) Load() ([]*Instance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.instances, f.creates = map[string]*Instance{}, map[string]int{}
	b, err := os.ReadFile(f.Path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading %s: %w", f.Path, err)
	}
	var st fileState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", f.Path, err)
	}
	for claim, n := range st.Creates {
		f.creates[claim] = n
	}
	out := make([]*Instance, 0, len(st.Instances))
	for id, inst := range st.Instances {
		f.instances[id] = inst
		cp := *inst
		out = append(out, &cp)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Put implements Store.
func (f *FileStore) Put(inst *Instance) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	cp := *inst
	_, known := f.instances[inst.ID]
	if err := f.write(func(m map[string]*Instance) { m[inst.ID] = &cp }, !known, inst.NodeClaim); err != nil {
		return err
	}
	return nil
}

// Delete implements Store.
func (f *FileStore) Delete(id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.write(func(m map[string]*Instance) { delete(m, id) }, false, "")
}

// write applies change to a copy of the machines and saves it; the memory copy changes only
// once the file is written.
func (f *FileStore) write(change func(map[string]*Instance), launched bool, claim string) error {
	if f.instances == nil {
		f.instances, f.creates = map[string]*Instance{}, map[string]int{}
	}
	next := make(map[string]*Instance, len(f.instances)+1)
	for k, v := range f.instances {
		next[k] = v
	}
	change(next)
	creates := make(map[string]int, len(f.creates)+1)
	for k, v := range f.creates {
		creates[k] = v
	}
	if launched {
		creates[claim]++
	}
	b, err := json.Marshal(fileState{Instances: next, Creates: creates})
	if err != nil {
		return fmt.Errorf("encoding the simulated cloud: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(f.Path), 0o755); err != nil {
		return fmt.Errorf("saving the simulated cloud: %w", err)
	}
	tmp := f.Path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("saving the simulated cloud: %w", err)
	}
	if err := os.Rename(tmp, f.Path); err != nil {
		return fmt.Errorf("saving the simulated cloud: %w", err)
	}
	f.instances, f.creates = next, creates
	return nil
}

// ConfigMapStore keeps each machine in a ConfigMap of the cluster (namespace Namespace, named
// capstan-sim-<instance id>, labelled with the cluster's name): the simulated cloud's state lives
// where Capstan's other state does, and every replica reads the same machines.
type ConfigMapStore struct {
	// Client writes; Reader reads without a cache (the leader that loads must see the latest).
	Client    client.Client
	Reader    client.Reader
	Namespace string
	Cluster   string
	// Timeout bounds each call (default 10s).
	Timeout time.Duration
}

var _ Store = (*ConfigMapStore)(nil)

// Label keys of the ConfigMaps.
const (
	// StoreClusterLabel names the cluster a machine belongs to.
	StoreClusterLabel = "capstan.dev/sim-cluster"
	storeKey          = "instance"
)

func (s *ConfigMapStore) ctx() (context.Context, context.CancelFunc) {
	d := s.Timeout
	if d == 0 {
		d = 10 * time.Second
	}
	return context.WithTimeout(context.Background(), d)
}

func (s *ConfigMapStore) name(id string) string { return "capstan-sim-" + id }

// Load implements Store.
func (s *ConfigMapStore) Load() ([]*Instance, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	cms := &corev1.ConfigMapList{}
	if err := s.Reader.List(ctx, cms, client.InNamespace(s.Namespace), client.MatchingLabels{StoreClusterLabel: s.Cluster}); err != nil {
		return nil, fmt.Errorf("listing the simulated cloud's configmaps in %s: %w", s.Namespace, err)
	}
	var out []*Instance
	for i := range cms.Items {
		inst := &Instance{}
		if err := json.Unmarshal([]byte(cms.Items[i].Data[storeKey]), inst); err != nil {
			return nil, fmt.Errorf("decoding configmap %s/%s: %w", s.Namespace, cms.Items[i].Name, err)
		}
		out = append(out, inst)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Put implements Store.
func (s *ConfigMapStore) Put(inst *Instance) error {
	b, err := json.Marshal(inst)
	if err != nil {
		return fmt.Errorf("encoding instance %s: %w", inst.ID, err)
	}
	ctx, cancel := s.ctx()
	defer cancel()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.name(inst.ID),
		Labels: map[string]string{StoreClusterLabel: s.Cluster}}, Data: map[string]string{storeKey: string(b)}}
	err = s.Client.Create(ctx, cm)
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	cur := &corev1.ConfigMap{}
	if err := s.Reader.Get(ctx, client.ObjectKeyFromObject(cm), cur); err != nil {
		return err
	}
	cur.Data = cm.Data
	return s.Client.Update(ctx, cur)
}

// Delete implements Store.
func (s *ConfigMapStore) Delete(id string) error {
	ctx, cancel := s.ctx()
	defer cancel()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.name(id)}}
	return client.IgnoreNotFound(s.Client.Delete(ctx, cm))
}

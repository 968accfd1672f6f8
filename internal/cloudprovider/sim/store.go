package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
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

// FileStore keeps the machines in one file: a journal of JSON entries, one per line, each a
// snapshot of every machine or one change (a machine written or deleted). A change appends one
// line — rewriting the whole file on every change cost a thousand-machine burst a third of
// Capstan's CPU — and the file is compacted into one snapshot when the journal has grown past
// twice the machines. A file of the earlier format (one snapshot) reads as a journal of one entry.
// The file also counts the machines ever launched per NodeClaim ("creates"), as a cloud's audit
// log would, so tests can check that no claim bought two across restarts.
type FileStore struct {
	Path string

	mu        sync.Mutex
	instances map[string]*Instance
	creates   map[string]int
	// entries counts the journal's lines, for compaction.
	entries int
}

var _ Store = (*FileStore)(nil)

// journalEntry is one line of the file: a snapshot (Instances, Creates) or a change (Put, with
// Launched when it is a new launch for its claim, or Delete).
type journalEntry struct {
	Instances map[string]*Instance `json:"instances,omitempty"`
	Creates   map[string]int       `json:"creates,omitempty"`
	Put       *Instance            `json:"put,omitempty"`
	Launched  bool                 `json:"launched,omitempty"`
	Delete    string               `json:"delete,omitempty"`
}

// ReadFileStore reads a FileStore's file without changing it: the machines by ID and the
// launches per claim. A last line cut short (a write interrupted by a crash, or being written
// now) is ignored; it was never acknowledged.
func ReadFileStore(path string) (map[string]*Instance, map[string]int, error) {
	instances, creates, _, _, err := readJournal(path)
	return instances, creates, err
}

func readJournal(path string) (instances map[string]*Instance, creates map[string]int, entries int, torn bool, err error) {
	instances, creates = map[string]*Instance{}, map[string]int{}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return instances, creates, 0, false, nil
	case err != nil:
		return nil, nil, 0, false, fmt.Errorf("reading %s: %w", path, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		var e journalEntry
		err := dec.Decode(&e)
		if errors.Is(err, io.EOF) {
			return instances, creates, entries, false, nil
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return instances, creates, entries, true, nil
		}
		if err != nil {
			return nil, nil, 0, false, fmt.Errorf("decoding %s, entry %d: %w", path, entries+1, err)
		}
		entries++
		if e.Instances != nil || e.Creates != nil {
			instances, creates = map[string]*Instance{}, map[string]int{}
			maps.Copy(instances, e.Instances)
			maps.Copy(creates, e.Creates)
		}
		if e.Put != nil {
			instances[e.Put.ID] = e.Put
			if e.Launched {
				creates[e.Put.NodeClaim]++
			}
		}
		if e.Delete != "" {
			delete(instances, e.Delete)
		}
	}
}

// Load implements Store.
func (f *FileStore) Load() ([]*Instance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	instances, creates, entries, torn, err := readJournal(f.Path)
	if err != nil {
		return nil, err
	}
	f.instances, f.creates, f.entries = instances, creates, entries
	if torn {
		// Appending after a cut line would corrupt the next entry: start from a snapshot.
		if err := f.compact(); err != nil {
			return nil, err
		}
	}
	out := make([]*Instance, 0, len(instances))
	for _, inst := range instances {
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
	if err := f.append(journalEntry{Put: &cp, Launched: !known}); err != nil {
		return err
	}
	f.instances[inst.ID] = &cp
	if !known {
		f.creates[inst.NodeClaim]++
	}
	return f.maybeCompact()
}

// Delete implements Store.
func (f *FileStore) Delete(id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.append(journalEntry{Delete: id}); err != nil {
		return err
	}
	delete(f.instances, id)
	return f.maybeCompact()
}

// append writes one entry at the end of the file; memory changes only once it is written.
func (f *FileStore) append(e journalEntry) error {
	if f.instances == nil {
		f.instances, f.creates = map[string]*Instance{}, map[string]int{}
	}
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encoding the simulated cloud: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(f.Path), 0o755); err != nil {
		return fmt.Errorf("saving the simulated cloud: %w", err)
	}
	file, err := os.OpenFile(f.Path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("saving the simulated cloud: %w", err)
	}
	_, werr := file.Write(append(b, '\n'))
	if err := errors.Join(werr, file.Close()); err != nil {
		return fmt.Errorf("saving the simulated cloud: %w", err)
	}
	f.entries++
	return nil
}

// maybeCompact rewrites the journal as one snapshot once it is more than twice as long as the
// machines it holds (and at least a hundred lines), so appends stay O(1) amortised.
func (f *FileStore) maybeCompact() error {
	if f.entries <= max(100, 2*len(f.instances)) {
		return nil
	}
	return f.compact()
}

// compact replaces the file, atomically, with one snapshot of what memory holds.
func (f *FileStore) compact() error {
	b, err := json.Marshal(journalEntry{Instances: f.instances, Creates: f.creates})
	if err != nil {
		return fmt.Errorf("encoding the simulated cloud: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(f.Path), 0o755); err != nil {
		return fmt.Errorf("saving the simulated cloud: %w", err)
	}
	tmp := f.Path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("saving the simulated cloud: %w", err)
	}
	if err := os.Rename(tmp, f.Path); err != nil {
		return fmt.Errorf("saving the simulated cloud: %w", err)
	}
	f.entries = 1
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

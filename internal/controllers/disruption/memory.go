package disruption

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"capstan.dev/capstan/internal/disruptionplan"
)

// MemoryConfigMapName is the ConfigMap (in the leader-election namespace) that keeps the churn
// guard's evictions across restarts and failovers.
const MemoryConfigMapName = "capstan-disruption-memory"

// memoryKey is the ConfigMap's data key.
const memoryKey = "evictions.json"

// maxRemembered bounds the evictions kept (the newest), so the ConfigMap stays far below
// Kubernetes' 1 MiB: about 150 bytes each.
const maxRemembered = 4000

// loadMemory reads the evictions a previous leader recorded, once, before the first decision.
// Without the ConfigMap there is nothing to remember; a failed read fails the round (a decision
// without the memory could undo the guard).
func (c *Controller) loadMemory(ctx context.Context) error {
	key := c.Options.MemoryConfigMap
	if c.memoryLoaded || key.Name == "" {
		return nil
	}
	cm := &corev1.ConfigMap{}
	err := c.APIReader.Get(ctx, key, cm)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("reading the churn guard's memory %s: %w", key, err)
	default:
		var saved []disruptionplan.Eviction
		if err := json.Unmarshal([]byte(cm.Data[memoryKey]), &saved); err != nil {
			// A damaged record is dropped, not fatal: the guard then knows less, as after a
			// restart without it.
			saved = nil
		}
		now, memory := c.Clock.Now(), c.Options.Decision.ChurnMemory()
		saved = slices.DeleteFunc(saved, func(e disruptionplan.Eviction) bool { return now.Sub(e.At) >= memory })
		known := map[string]bool{}
		for _, e := range c.evictions {
			known[evictionKey(e)] = true
		}
		for _, e := range saved {
			if !known[evictionKey(e)] {
				c.evictions = append(c.evictions, e)
			}
		}
	}
	c.memoryLoaded = true
	return nil
}

// saveMemory writes the evictions to the ConfigMap; it is called before the claims whose pods
// they are are deleted, so a crash in between forgets nothing.
func (c *Controller) saveMemory(ctx context.Context) error {
	key := c.Options.MemoryConfigMap
	if key.Name == "" {
		return nil
	}
	evictions := c.evictions
	if len(evictions) > maxRemembered {
		evictions = evictions[len(evictions)-maxRemembered:]
	}
	b, err := json.Marshal(evictions)
	if err != nil {
		return err
	}
	// A conflict, or a create that lost to another writer's, is read again and retried.
	retriable := func(err error) bool { return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) }
	err = retry.OnError(retry.DefaultRetry, retriable, func() error {
		cm := &corev1.ConfigMap{}
		err := c.APIReader.Get(ctx, key, cm)
		if apierrors.IsNotFound(err) {
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
				Labels: map[string]string{"app.kubernetes.io/managed-by": "capstan"}}, Data: map[string]string{memoryKey: string(b)}}
			err = c.Client.Create(ctx, cm)
		} else if err == nil {
			if cm.Data == nil {
				cm.Data = map[string]string{}
			}
			cm.Data[memoryKey] = string(b)
			err = c.Client.Update(ctx, cm)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("writing the churn guard's memory %s: %w", key, err)
	}
	return nil
}

// evictionKey identifies an eviction across a JSON round trip (which drops a time's monotonic
// reading and location).
func evictionKey(e disruptionplan.Eviction) string {
	return fmt.Sprintf("%s/%s/%s/%d", e.Namespace, e.Name, e.Owner, e.At.UnixNano())
}

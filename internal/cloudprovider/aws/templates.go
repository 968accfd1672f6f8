package aws

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"k8s.io/utils/clock"

	awsv1 "capstan.dev/capstan/api/aws/v1"
)

// TemplateTTL is how long a launch template no launch has used is kept.
const TemplateTTL = time.Hour

// templateAPI is the part of EC2 launch templates use.
type templateAPI interface {
	DescribeLaunchTemplates(context.Context, *ec2.DescribeLaunchTemplatesInput, ...func(*ec2.Options)) (*ec2.DescribeLaunchTemplatesOutput, error)
	CreateLaunchTemplate(context.Context, *ec2.CreateLaunchTemplateInput, ...func(*ec2.Options)) (*ec2.CreateLaunchTemplateOutput, error)
	DeleteLaunchTemplate(context.Context, *ec2.DeleteLaunchTemplateInput, ...func(*ec2.Options)) (*ec2.DeleteLaunchTemplateOutput, error)
}

// templates is the launch templates part of the provider: it creates a template the first time
// a launch needs it, remembers which exist and when each was last used, and deletes those no
// launch used for TemplateTTL. Templates are named by their content, so two launches that need
// the same one share it.
type templates struct {
	api     templateAPI
	clock   clock.PassiveClock
	cluster string

	mu sync.Mutex
	// known are the templates that exist; used is when a launch last used each.
	known map[string]bool
	used  map[string]time.Time
}

func newTemplates(api templateAPI, clk clock.PassiveClock, cluster string) *templates {
	return &templates{api: api, clock: clk, cluster: cluster, known: map[string]bool{}, used: map[string]time.Time{}}
}

// ensure makes sure the template exists (created once, found by name after) and records its
// use.
func (t *templates) ensure(ctx context.Context, lt *launchTemplate, tags map[string]string) error {
	t.mu.Lock()
	known := t.known[lt.name]
	t.mu.Unlock()
	if !known {
		if err := t.create(ctx, lt, tags); err != nil {
			return err
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.known[lt.name] = true
	t.used[lt.name] = t.clock.Now()
	return nil
}

// create creates the template unless it exists (made by another replica, or before a restart).
func (t *templates) create(ctx context.Context, lt *launchTemplate, tags map[string]string) error {
	_, err := t.api.DescribeLaunchTemplates(ctx, &ec2.DescribeLaunchTemplatesInput{LaunchTemplateNames: []string{lt.name}})
	if err == nil {
		return nil
	}
	if !isCode(err, "InvalidLaunchTemplateName.NotFoundException") {
		return fmt.Errorf("describing launch template %s: %w", lt.name, err)
	}
	tg := maps.Clone(tags)
	tg["karpenter.k8s.aws/cluster"] = t.cluster
	_, err = t.api.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{LaunchTemplateName: aws.String(lt.name), LaunchTemplateData: lt.data,
		TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeLaunchTemplate, Tags: ec2Tags(tg)}}})
	if err != nil && !isCode(err, "InvalidLaunchTemplateName.AlreadyExistsException") {
		return fmt.Errorf("creating launch template %s: %w", lt.name, err)
	}
	return nil
}

// collect deletes the class's launch templates that no launch used for TemplateTTL (by this
// process; a template this process never used counts from its creation): a class whose claims'
// labels or taints change would otherwise pile them up. A template deleted while a launch is
// about to use it is recreated by that launch's retry.
func (t *templates) collect(ctx context.Context, class string) error {
	out, err := t.api.DescribeLaunchTemplates(ctx, &ec2.DescribeLaunchTemplatesInput{Filters: []ec2types.Filter{
		{Name: aws.String("tag:" + awsv1.TagEC2NodeClass), Values: []string{class}},
		{Name: aws.String("tag:karpenter.k8s.aws/cluster"), Values: []string{t.cluster}},
	}})
	if err != nil {
		return fmt.Errorf("listing launch templates of EC2NodeClass %s: %w", class, err)
	}
	now := t.clock.Now()
	for _, lt := range out.LaunchTemplates {
		name := aws.ToString(lt.LaunchTemplateName)
		t.mu.Lock()
		last, ok := t.used[name]
		t.mu.Unlock()
		if !ok {
			last = aws.ToTime(lt.CreateTime)
		}
		if now.Sub(last) < TemplateTTL {
			continue
		}
		if _, err := t.api.DeleteLaunchTemplate(ctx, &ec2.DeleteLaunchTemplateInput{LaunchTemplateName: lt.LaunchTemplateName}); err != nil &&
			!isCode(err, "InvalidLaunchTemplateName.NotFoundException") {
			return fmt.Errorf("deleting launch template %s: %w", name, err)
		}
		t.forget(name)
	}
	return nil
}

// forget drops a template from what is known (deleted, or deleted behind Capstan's back).
func (t *templates) forget(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.known, name)
	delete(t.used, name)
}

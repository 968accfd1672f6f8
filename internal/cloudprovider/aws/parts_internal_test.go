package aws

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	awsv1 "capstan.dev/capstan/api/aws/v1"
	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/requirements"
)

// These tables test the launch and resolution logic in-process, over the SDK's own input and
// output types; the provider as a whole is tested through the SDK against test/awsfake.

func offering(zone, ct string, price float64) cloudprovider.Offering {
	return cloudprovider.Offering{Zone: zone, CapacityType: ct, Price: price, Available: true}
}

func cpuType(name string, cpu string, offerings ...cloudprovider.Offering) *cloudprovider.InstanceType {
	return cloudprovider.NewInstanceType(name, map[string]string{corev1.LabelArchStable: "amd64"},
		corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}, nil, offerings)
}

func reqs(t *testing.T, kv ...string) requirements.Requirements {
	t.Helper()
	r := requirements.Requirements{}
	for i := 0; i < len(kv); i += 2 {
		r.Add(requirements.MustNew(kv[i], requirements.In, strings.Split(kv[i+1], ",")...))
	}
	return r
}

func TestCandidatesForChoosesCapacityTypeAndOrder(t *testing.T) {
	reserved := offering("a", karpv1.CapacityTypeReserved, 0.00001)
	reserved.ReservationID = "cr-1"
	unavailableSpot := offering("a", karpv1.CapacityTypeSpot, 0.01)
	unavailableSpot.Available = false
	its := []*cloudprovider.InstanceType{
		cpuType("big", "8", offering("a", karpv1.CapacityTypeOnDemand, 0.4), offering("b", karpv1.CapacityTypeSpot, 0.12)),
		cpuType("mid", "4", offering("a", karpv1.CapacityTypeOnDemand, 0.2), offering("b", karpv1.CapacityTypeOnDemand, 0.19), unavailableSpot),
		cpuType("small", "1", offering("a", karpv1.CapacityTypeOnDemand, 0.05), offering("a", karpv1.CapacityTypeSpot, 0.02)),
		cpuType("pinned", "4", offering("a", karpv1.CapacityTypeOnDemand, 0.2), reserved),
	}
	twoCPU := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}
	for _, tc := range []struct {
		name     string
		reqs     requirements.Requirements
		wantType string
		want     []string // type:cheapest
	}{
		{"spot when allowed and available, cheapest first", reqs(t), karpv1.CapacityTypeSpot, []string{"big:0.12"}},
		{"on-demand when spot is not allowed", reqs(t, karpv1.CapacityTypeLabelKey, karpv1.CapacityTypeOnDemand), karpv1.CapacityTypeOnDemand,
			[]string{"mid:0.19", "pinned:0.2", "big:0.4"}},
		{"the zone requirement removes offerings", reqs(t, karpv1.CapacityTypeLabelKey, karpv1.CapacityTypeOnDemand, karpv1.ZoneLabelKey, "a"),
			karpv1.CapacityTypeOnDemand, []string{"mid:0.2", "pinned:0.2", "big:0.4"}},
		{"a reservation only for a claim pinned to it", reqs(t, cloudprovider.ReservationIDLabelKey, "cr-1"), karpv1.CapacityTypeReserved,
			[]string{"pinned:1e-05"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cands, ct := candidatesFor(its, tc.reqs, twoCPU)
			var got []string
			for _, c := range cands {
				got = append(got, c.it.Name+":"+strconv.FormatFloat(c.cheapest, 'g', -1, 64))
				for _, o := range c.offerings {
					if o.CapacityType != ct {
						t.Errorf("%s offers %s in a %s launch", c.it.Name, o.CapacityType, ct)
					}
				}
			}
			if ct != tc.wantType || !slices.Equal(got, tc.want) {
				t.Errorf("got %s %v, want %s %v", ct, got, tc.wantType, tc.want)
			}
		})
	}
	if cands, _ := candidatesFor(its, reqs(t), corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64")}); len(cands) != 0 {
		t.Errorf("nothing holds 64 CPUs, got %d candidates", len(cands))
	}
}

func TestFleetInputByCapacityType(t *testing.T) {
	claim := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: "default-abc12"}}
	for _, tc := range []struct {
		name                   string
		capacityType, resvType string
		prioritized            bool
		wantTarget             ec2types.DefaultTargetCapacityType
		wantSpot, wantOnDemand bool
		wantOnDemandStrategy   ec2types.FleetOnDemandAllocationStrategy
	}{
		{"spot: price-capacity-optimized", karpv1.CapacityTypeSpot, "", false, ec2types.DefaultTargetCapacityTypeSpot, true, false, ""},
		{"on-demand: lowest price", karpv1.CapacityTypeOnDemand, "", false, ec2types.DefaultTargetCapacityTypeOnDemand, false, true,
			ec2types.FleetOnDemandAllocationStrategyLowestPrice},
		{"on-demand with overlays: prioritized", karpv1.CapacityTypeOnDemand, "", true, ec2types.DefaultTargetCapacityTypeOnDemand, false, true,
			ec2types.FleetOnDemandAllocationStrategyPrioritized},
		{"a reservation's machine is on-demand", karpv1.CapacityTypeReserved, cloudprovider.ReservationTypeDefault, false,
			ec2types.DefaultTargetCapacityTypeOnDemand, false, true, ec2types.FleetOnDemandAllocationStrategyLowestPrice},
		{"a capacity block's is of its own market", karpv1.CapacityTypeReserved, cloudprovider.ReservationTypeCapacityBlock, false,
			ec2types.DefaultTargetCapacityTypeCapacityBlock, false, true, ec2types.FleetOnDemandAllocationStrategyLowestPrice},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := fleetInput(claim, nil, tc.capacityType, tc.resvType, tc.prioritized, map[string]string{NodeClaimTag: claim.Name})
			if in.Type != ec2types.FleetTypeInstant || aws.ToInt32(in.TargetCapacitySpecification.TotalTargetCapacity) != 1 {
				t.Errorf("not an instant fleet of one: %v, %d", in.Type, aws.ToInt32(in.TargetCapacitySpecification.TotalTargetCapacity))
			}
			if got := in.TargetCapacitySpecification.DefaultTargetCapacityType; got != tc.wantTarget {
				t.Errorf("target capacity type %q, want %q", got, tc.wantTarget)
			}
			if (in.SpotOptions != nil) != tc.wantSpot || (in.OnDemandOptions != nil) != tc.wantOnDemand {
				t.Fatalf("spot options %v, on-demand options %v", in.SpotOptions, in.OnDemandOptions)
			}
			if tc.wantSpot && in.SpotOptions.AllocationStrategy != ec2types.SpotAllocationStrategyPriceCapacityOptimized {
				t.Errorf("spot strategy %q", in.SpotOptions.AllocationStrategy)
			}
			if tc.wantOnDemand && in.OnDemandOptions.AllocationStrategy != tc.wantOnDemandStrategy {
				t.Errorf("on-demand strategy %q, want %q", in.OnDemandOptions.AllocationStrategy, tc.wantOnDemandStrategy)
			}
			if aws.ToString(in.ClientToken) != clientToken(claim) || clientToken(claim) == "" {
				t.Errorf("client token %q, want the claim's (%q)", aws.ToString(in.ClientToken), clientToken(claim))
			}
			for _, ts := range in.TagSpecifications {
				if !slices.ContainsFunc(ts.Tags, func(tg ec2types.Tag) bool { return aws.ToString(tg.Key) == NodeClaimTag }) {
					t.Errorf("%s not tagged with the claim", ts.ResourceType)
				}
			}
		})
	}
}

func TestFleetOutcomeSortsCapacityFromOtherErrors(t *testing.T) {
	override := func(typ, zone string) *ec2types.LaunchTemplateAndOverridesResponse {
		return &ec2types.LaunchTemplateAndOverridesResponse{Overrides: &ec2types.FleetLaunchTemplateOverrides{
			InstanceType: ec2types.InstanceType(typ), AvailabilityZone: aws.String(zone)}}
	}
	iceErr := ec2types.CreateFleetError{ErrorCode: aws.String("InsufficientInstanceCapacity"), LaunchTemplateAndOverrides: override("m5.large", "us-east-1a")}
	reservationFull := ec2types.CreateFleetError{ErrorCode: aws.String("ReservationCapacityExceeded"), LaunchTemplateAndOverrides: override("m5.large", "us-east-1b")}
	quota := ec2types.CreateFleetError{ErrorCode: aws.String("VcpuLimitExceeded"), ErrorMessage: aws.String("raise your quota")}
	launched := ec2types.CreateFleetInstance{InstanceIds: []string{"i-1"}, InstanceType: "m5.xlarge", LaunchTemplateAndOverrides: override("m5.xlarge", "us-east-1c")}
	for _, tc := range []struct {
		name      string
		out       ec2.CreateFleetOutput
		wantID    string
		wantICE   []string
		wantOther []string
	}{
		{"launched despite capacity errors", ec2.CreateFleetOutput{Errors: []ec2types.CreateFleetError{iceErr}, Instances: []ec2types.CreateFleetInstance{launched}},
			"i-1/m5.xlarge/us-east-1c", []string{"m5.large/us-east-1a/cr-9"}, nil},
		{"only capacity errors", ec2.CreateFleetOutput{Errors: []ec2types.CreateFleetError{iceErr, reservationFull}},
			"", []string{"m5.large/us-east-1a/cr-9", "m5.large/us-east-1b/cr-9"}, nil},
		{"another error is not a capacity one", ec2.CreateFleetOutput{Errors: []ec2types.CreateFleetError{quota}},
			"", nil, []string{"VcpuLimitExceeded: raise your quota"}},
		{"an instance entry without ids launched nothing", ec2.CreateFleetOutput{Instances: []ec2types.CreateFleetInstance{{InstanceType: "m5.large"}}},
			"", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ice, other := fleetOutcome(&tc.out, karpv1.CapacityTypeReserved, "cr-9")
			id := ""
			if got != nil {
				id = got.id + "/" + got.instanceType + "/" + got.zone
			}
			var keys []string
			for _, k := range ice {
				if k.CapacityType != karpv1.CapacityTypeReserved {
					t.Errorf("offering %v of capacity type %q", k, k.CapacityType)
				}
				keys = append(keys, k.InstanceType+"/"+k.Zone+"/"+k.ReservationID)
			}
			if id != tc.wantID || !slices.Equal(keys, tc.wantICE) || !slices.Equal(other, tc.wantOther) {
				t.Errorf("got %q %v %v, want %q %v %v", id, keys, other, tc.wantID, tc.wantICE, tc.wantOther)
			}
		})
	}
}

func TestImagesInputByTerm(t *testing.T) {
	for _, tc := range []struct {
		name        string
		term        awsv1.AMISelectorTerm
		wantWhat    string
		wantOwners  []string
		wantFilters []string // name=values
	}{
		{"an id", awsv1.AMISelectorTerm{ID: "ami-1"}, "id ami-1", nil, []string{"image-id=ami-1"}},
		{"a name alone: Amazon's and the account's", awsv1.AMISelectorTerm{Name: "al2023-*"}, "name al2023-*", []string{"self", "amazon"},
			[]string{"name=al2023-*"}},
		{"a name and an owner", awsv1.AMISelectorTerm{Name: "mine", Owner: "123456789012"}, "name mine owner 123456789012", []string{"123456789012"},
			[]string{"name=mine"}},
		{"a name and tags: still Amazon's and the account's", awsv1.AMISelectorTerm{Name: "golden-*", Tags: map[string]string{"team": "a"}},
			"name golden-* tags team=a", []string{"self", "amazon"}, []string{"name=golden-*", "tag:team=a"}},
		{"tags: any owner", awsv1.AMISelectorTerm{Tags: map[string]string{"team": "a"}}, "tags team=a", nil, []string{"tag:team=a"}},
		{"an alias: filled from its parameters", awsv1.AMISelectorTerm{Alias: "al2023@latest"}, "alias al2023@latest", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, what := imagesInput(tc.term)
			var filters []string
			for _, f := range in.Filters {
				filters = append(filters, aws.ToString(f.Name)+"="+strings.Join(f.Values, ","))
			}
			if what != tc.wantWhat || !slices.Equal(in.Owners, tc.wantOwners) || !slices.Equal(filters, tc.wantFilters) {
				t.Errorf("got %q owners %v filters %v, want %q %v %v", what, in.Owners, filters, tc.wantWhat, tc.wantOwners, tc.wantFilters)
			}
			if !aws.ToBool(in.IncludeDeprecated) {
				t.Error("deprecated images left out: one is booted when nothing current serves a type")
			}
		})
	}
}

func TestAMIsFromNewestFirstWithDeprecation(t *testing.T) {
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	img := func(id, created, deprecates string, arch ec2types.ArchitectureValues) ec2types.Image {
		return ec2types.Image{ImageId: aws.String(id), Name: aws.String("n-" + id), CreationDate: aws.String(created), DeprecationTime: aws.String(deprecates), Architecture: arch}
	}
	gpu := []awsv1.AMIRequirement{{Key: "karpenter.k8s.aws/instance-gpu-count", Operator: "Exists"}}
	neuron := []awsv1.AMIRequirement{{Key: "karpenter.k8s.aws/instance-accelerator-count", Operator: "Exists"}}
	got := amisFrom([]foundImage{
		newFoundImage(img("ami-old", "2026-01-01T00:00:00Z", "2026-05-01T00:00:00Z", ec2types.ArchitectureValuesX8664), nil),
		newFoundImage(img("ami-new", "2026-05-20T00:00:00Z", "2027-01-01T00:00:00Z", ec2types.ArchitectureValuesArm64), nil),
		newFoundImage(img("ami-gpu", "2026-03-01T00:00:00Z", "", ec2types.ArchitectureValuesX8664), [][]awsv1.AMIRequirement{gpu, neuron}),
	}, now)
	var rows []string
	for _, a := range got {
		row := a.ID + " " + a.Requirements[0].Key + "=" + strings.Join(a.Requirements[0].Values, ",")
		if a.Deprecated {
			row += " deprecated"
		}
		rows = append(rows, row)
	}
	want := []string{
		"ami-new kubernetes.io/arch=arm64",
		"ami-gpu karpenter.k8s.aws/instance-gpu-count=",
		"ami-gpu karpenter.k8s.aws/instance-accelerator-count=",
		"ami-old kubernetes.io/arch=amd64 deprecated",
	}
	if !slices.Equal(rows, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"))
	}
}

func TestReservationStatusRoomAndExpiry(t *testing.T) {
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	res := func(total, avail int32, typ ec2types.CapacityReservationType, end *time.Time) ec2types.CapacityReservation {
		return ec2types.CapacityReservation{CapacityReservationId: aws.String("cr-1"), TotalInstanceCount: aws.Int32(total),
			AvailableInstanceCount: aws.Int32(avail), ReservationType: typ, EndDate: end, InstanceType: aws.String("p5.48xlarge")}
	}
	soon, later := now.Add(30*time.Minute), now.Add(3*time.Hour)
	for _, tc := range []struct {
		name      string
		r         ec2types.CapacityReservation
		ours      int
		wantRoom  int
		wantType  string
		wantState string
	}{
		{"empty: all of it", res(4, 4, ec2types.CapacityReservationTypeDefault, nil), 0, 4, cloudprovider.ReservationTypeDefault, "active"},
		{"ours in it still count as room for our claims", res(4, 1, ec2types.CapacityReservationTypeDefault, nil), 3, 4, cloudprovider.ReservationTypeDefault, "active"},
		{"others' machines are not", res(4, 1, ec2types.CapacityReservationTypeDefault, nil), 1, 2, cloudprovider.ReservationTypeDefault, "active"},
		{"a capacity block before its drain", res(2, 2, ec2types.CapacityReservationTypeCapacityBlock, &later), 0, 2, cloudprovider.ReservationTypeCapacityBlock, "active"},
		{"a capacity block within its drain lead is expiring", res(2, 2, ec2types.CapacityReservationTypeCapacityBlock, &soon), 0, 2,
			cloudprovider.ReservationTypeCapacityBlock, "expiring"},
		{"a default reservation's end does not drain", res(2, 2, ec2types.CapacityReservationTypeDefault, &soon), 0, 2, cloudprovider.ReservationTypeDefault, "active"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cr, room := reservationStatus(tc.r, tc.ours, now)
			if room != tc.wantRoom || cr.ReservationType != tc.wantType || cr.State != tc.wantState || cr.ID != "cr-1" || cr.InstanceType != "p5.48xlarge" {
				t.Errorf("got room %d %+v, want room %d type %s state %s", room, cr, tc.wantRoom, tc.wantType, tc.wantState)
			}
		})
	}
}

func TestReservationsInputByTerm(t *testing.T) {
	in := reservationsInput(awsv1.CapacityReservationSelectorTerm{ID: "cr-1", OwnerID: "123456789012", Tags: map[string]string{"team": "a"}})
	var filters []string
	for _, f := range in.Filters {
		filters = append(filters, aws.ToString(f.Name)+"="+strings.Join(f.Values, ","))
	}
	want := []string{"state=active", "tag:team=a", "owner-id=123456789012"}
	if !slices.Equal(in.CapacityReservationIds, []string{"cr-1"}) || !slices.Equal(filters, want) {
		t.Errorf("got ids %v filters %v, want [cr-1] %v", in.CapacityReservationIds, filters, want)
	}
}

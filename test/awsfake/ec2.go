package awsfake

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

const ec2NS = "http://ec2.amazonaws.com/doc/2016-11-15/"

func (s *Server) ec2(w http.ResponseWriter, action string, f form) {
	s.mu.Lock()
	var res *el
	var err *apiError
	switch action {
	case "DescribeSubnets":
		res, err = s.describeSubnets(f)
	case "DescribeSecurityGroups":
		res, err = s.describeSecurityGroups(f)
	case "DescribeImages":
		res, err = s.describeImages(f)
	case "DescribeInstanceTypes":
		res, err = s.describeInstanceTypes(f)
	case "DescribeInstanceTypeOfferings":
		res, err = s.describeInstanceTypeOfferings(f)
	case "DescribeSpotPriceHistory":
		res, err = s.describeSpotPriceHistory(f)
	case "CreateLaunchTemplate":
		res, err = s.createLaunchTemplate(f)
	case "DescribeLaunchTemplates":
		res, err = s.describeLaunchTemplates(f)
	case "DeleteLaunchTemplate":
		res, err = s.deleteLaunchTemplate(f)
	case "CreateFleet":
		res, err = s.createFleet(f)
	case "DescribeInstances":
		res, err = s.describeInstances(f)
	case "DescribeInstanceStatus":
		res, err = s.describeInstanceStatus(f)
	case "TerminateInstances":
		res, err = s.terminateInstances(f)
	case "CreateTags":
		res, err = s.createTags(f)
	case "DescribeCapacityReservations":
		res, err = s.describeCapacityReservations(f)
	default:
		err = errorf("InvalidAction", "The action %s is not valid for this web service.", action)
	}
	s.mu.Unlock()
	if err != nil {
		s.writeError(w, "ec2", err.Fault)
		return
	}
	res.name = action + "Response"
	res.kids = append([]*el{T("requestId", newID(""))}, res.kids...)
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	_, _ = io.WriteString(w, render(res, ec2NS))
}

// page cuts items to MaxResults from NextToken (an index).
func page[T any](f form, items []T) ([]T, string) {
	start, _ := strconv.Atoi(f.Str("NextToken"))
	if start > len(items) {
		start = len(items)
	}
	items = items[start:]
	if n, err := strconv.Atoi(f.Str("MaxResults")); err == nil && n > 0 && n < len(items) {
		return items[:n], strconv.Itoa(start + n)
	}
	return items, ""
}

func sortedKeys[V any](m map[string]V) []string {
	keys := slices.Collect(maps.Keys(m))
	sort.Strings(keys)
	return keys
}

func (s *Server) describeSubnets(f form) (*el, *apiError) {
	ids, fs := f.List("SubnetId"), f.filters()
	for _, id := range ids {
		if s.subnets[id] == nil {
			return nil, errorf("InvalidSubnetID.NotFound", "The subnet ID '%s' does not exist", id)
		}
	}
	var items []*el
	for _, id := range sortedKeys(s.subnets) {
		sn := s.subnets[id]
		if len(ids) > 0 && !slices.Contains(ids, id) {
			continue
		}
		if !matchFilters(fs, func(name string) []string {
			if v, ok := tagAttributes(sn.Tags, name); ok {
				return v
			}
			switch name {
			case "subnet-id":
				return []string{sn.ID}
			case "availability-zone":
				return []string{sn.Zone}
			case "availability-zone-id":
				return []string{sn.ZoneID}
			case "state":
				return []string{"available"}
			}
			return nil
		}) {
			continue
		}
		items = append(items, E("", T("subnetId", sn.ID), T("availabilityZone", sn.Zone), T("availabilityZoneId", sn.ZoneID),
			T("cidrBlock", sn.CIDR), T("availableIpAddressCount", strconv.Itoa(sn.AvailableIPs)), T("state", "available"),
			T("vpcId", "vpc-0capstan00000001"), T("ownerId", s.account), tagSet(sn.Tags)))
	}
	return E("", Set("subnetSet", items)), nil
}

func (s *Server) describeSecurityGroups(f form) (*el, *apiError) {
	ids, names, fs := f.List("GroupId"), f.List("GroupName"), f.filters()
	for _, id := range ids {
		if s.groups[id] == nil {
			return nil, errorf("InvalidGroup.NotFound", "The security group '%s' does not exist", id)
		}
	}
	var items []*el
	for _, id := range sortedKeys(s.groups) {
		g := s.groups[id]
		if len(ids) > 0 && !slices.Contains(ids, id) || len(names) > 0 && !slices.Contains(names, g.Name) {
			continue
		}
		if !matchFilters(fs, func(name string) []string {
			if v, ok := tagAttributes(g.Tags, name); ok {
				return v
			}
			switch name {
			case "group-id":
				return []string{g.ID}
			case "group-name":
				return []string{g.Name}
			}
			return nil
		}) {
			continue
		}
		items = append(items, E("", T("groupId", g.ID), T("groupName", g.Name), T("groupDescription", g.Name),
			T("vpcId", "vpc-0capstan00000001"), T("ownerId", s.account), tagSet(g.Tags)))
	}
	return E("", Set("securityGroupInfo", items)), nil
}

func (s *Server) describeImages(f form) (*el, *apiError) {
	ids, owners, fs := f.List("ImageId"), f.List("Owner"), f.filters()
	if err := knownFilters("DescribeImages", fs, "image-id", "name", "owner-id", "architecture", "state"); err != nil {
		return nil, err
	}
	// EC2 refuses a call that names an image it does not have (a filter on image-id does not).
	for _, id := range ids {
		if s.images[id] == nil {
			return nil, errorf("InvalidAMIID.NotFound", "The image id '[%s]' does not exist", id)
		}
	}
	var items []*el
	for _, id := range sortedKeys(s.images) {
		im := s.images[id]
		if len(ids) > 0 && !slices.Contains(ids, id) {
			continue
		}
		if len(owners) > 0 && !slices.Contains(owners, im.Owner) && !(slices.Contains(owners, "self") && im.Owner == s.account) &&
			!(slices.Contains(owners, "amazon") && im.Owner == "602401143452") {
			continue
		}
		if im.Deprecated && f.Str("IncludeDeprecated") != "true" && len(ids) == 0 {
			continue
		}
		if !matchFilters(fs, func(name string) []string {
			if v, ok := tagAttributes(im.Tags, name); ok {
				return v
			}
			switch name {
			case "image-id":
				return []string{im.ID}
			case "name":
				return []string{im.Name}
			case "owner-id":
				return []string{im.Owner}
			case "architecture":
				return []string{im.Architecture}
			case "state":
				return []string{"available"}
			}
			return nil
		}) {
			continue
		}
		e := E("", T("imageId", im.ID), T("name", im.Name), T("imageOwnerId", im.Owner), T("architecture", im.Architecture),
			T("creationDate", im.Created.UTC().Format(time.RFC3339)), T("imageState", "available"), T("imageType", "machine"),
			T("rootDeviceName", "/dev/xvda"), T("virtualizationType", "hvm"), tagSet(im.Tags))
		if im.Deprecated {
			e.kids = append(e.kids, T("deprecationTime", im.Created.Add(24*time.Hour).UTC().Format(time.RFC3339)))
		}
		items = append(items, e)
	}
	return E("", Set("imagesSet", items)), nil
}

// ebsLimit is the EBS attachment limit DescribeInstanceTypes reports: for Nitro types the 28
// attachments they share with network interfaces and instance-store volumes (EC2's documented
// limit; the catalog has no per-type figure), none for the others.
func ebsLimit(it *instanceType) []*el {
	if it.hypervisor != "nitro" {
		return nil
	}
	return []*el{T("attachmentLimitType", "shared"), T("maximumEbsAttachments", "28")}
}

func (it *instanceType) xml() *el {
	arch := it.arch
	if arch == "amd64" {
		arch = "x86_64"
	}
	manufacturer := map[string]string{"intel": "Intel", "amd": "AMD", "aws": "AWS", "apple": "Apple"}[it.manufacturer]
	e := E("", T("instanceType", it.name), T("currentGeneration", boolText(it.current)), T("bareMetal", boolText(strings.HasSuffix(it.name, ".metal"))),
		T("hypervisor", it.hypervisor), Set("supportedUsageClasses", []*el{T("", "on-demand"), T("", "spot")}),
		E("processorInfo", Set("supportedArchitectures", []*el{T("", arch)}), T("sustainedClockSpeedInGhz", strconv.FormatFloat(it.clockGHz, 'f', -1, 64)),
			Opt("manufacturer", manufacturer)),
		E("vCpuInfo", T("defaultVCpus", strconv.FormatInt(it.vcpus, 10))),
		E("memoryInfo", T("sizeInMiB", strconv.FormatInt(it.memMiB, 10))),
		E("networkInfo", T("maximumNetworkInterfaces", strconv.FormatInt(it.enis, 10)), T("ipv4AddressesPerInterface", strconv.FormatInt(it.ipsPerENI, 10)),
			T("encryptionInTransitSupported", boolText(it.encryption)), T("efaSupported", boolText(it.efa > 0)),
			E("efaInfo", T("maximumEfaInterfaces", strconv.FormatInt(it.efa, 10))),
			Set("networkCards", []*el{E("", T("networkCardIndex", "0"), T("maximumNetworkInterfaces", strconv.FormatInt(it.enis, 10)),
				T("baselineBandwidthInGbps", strconv.FormatFloat(float64(it.networkMbps)/1000, 'f', -1, 64)))})),
		E("ebsInfo", append([]*el{E("ebsOptimizedInfo", T("maximumBandwidthInMbps", strconv.FormatInt(it.ebsMbps, 10)),
			T("baselineBandwidthInMbps", strconv.FormatInt(it.ebsMbps, 10)))}, ebsLimit(it)...)...),
		Set("supportedVirtualizationTypes", []*el{T("", "hvm")}))
	if it.nvmeGB > 0 {
		e.kids = append(e.kids, T("instanceStorageSupported", "true"),
			E("instanceStorageInfo", T("totalSizeInGB", strconv.FormatInt(it.nvmeGB, 10)), T("nvmeSupport", "required")))
	}
	if it.gpuName != "" {
		e.kids = append(e.kids, E("gpuInfo", Set("gpus", []*el{E("", T("name", strings.ToUpper(it.gpuName)),
			T("manufacturer", strings.ToUpper(it.gpuManufacturer[:1])+it.gpuManufacturer[1:]), T("count", strconv.FormatInt(it.gpuCount, 10)),
			E("memoryInfo", T("sizeInMiB", strconv.FormatInt(it.gpuMemMiB, 10))))})))
	}
	if it.neuronCount > 0 {
		e.kids = append(e.kids, E("neuronInfo", Set("neuronDevices", []*el{E("", T("name", strings.ToUpper(it.neuronName[:1])+it.neuronName[1:]),
			T("count", strconv.FormatInt(it.neuronCount, 10)), E("coreInfo", T("count", strconv.FormatInt(it.neuronCores, 10))))})))
	}
	return e
}

func (s *Server) describeInstanceTypes(f form) (*el, *apiError) {
	names, fs := f.List("InstanceType"), f.filters()
	var sel []*instanceType
	for _, it := range s.types {
		if len(names) > 0 && !slices.Contains(names, it.name) {
			continue
		}
		if !matchFilters(fs, func(name string) []string {
			switch name {
			case "instance-type":
				return []string{it.name}
			case "current-generation":
				return []string{boolText(it.current)}
			case "supported-virtualization-type":
				return []string{"hvm"}
			case "processor-info.supported-architecture":
				if it.arch == "amd64" {
					return []string{"x86_64"}
				}
				return []string{it.arch}
			}
			return nil
		}) {
			continue
		}
		sel = append(sel, it)
	}
	sel, next := page(f, sel)
	var items []*el
	for _, it := range sel {
		items = append(items, it.xml())
	}
	return E("", Set("instanceTypeSet", items), Opt("nextToken", next)), nil
}

func (s *Server) describeInstanceTypeOfferings(f form) (*el, *apiError) {
	lt := f.Str("LocationType")
	if lt == "" {
		lt = "region"
	}
	fs := f.filters()
	type offering struct{ name, location string }
	var all []offering
	for _, it := range s.types {
		locs := []string{s.region}
		switch lt {
		case "availability-zone":
			locs = nil
			for _, z := range s.zones {
				locs = append(locs, z.Name)
			}
		case "availability-zone-id":
			locs = nil
			for _, z := range s.zones {
				locs = append(locs, z.ID)
			}
		}
		for _, l := range locs {
			o := offering{it.name, l}
			if matchFilters(fs, func(name string) []string {
				switch name {
				case "instance-type":
					return []string{o.name}
				case "location":
					return []string{o.location}
				}
				return nil
			}) {
				all = append(all, o)
			}
		}
	}
	all, next := page(f, all)
	var items []*el
	for _, o := range all {
		items = append(items, E("", T("instanceType", o.name), T("location", o.location), T("locationType", lt)))
	}
	return E("", Set("instanceTypeOfferingSet", items), Opt("nextToken", next)), nil
}

func (s *Server) describeSpotPriceHistory(f form) (*el, *apiError) {
	names, fs := f.List("InstanceType"), f.filters()
	descs := f.List("ProductDescription")
	if len(descs) > 0 && !slices.Contains(descs, "Linux/UNIX") && !slices.Contains(descs, "Linux/UNIX (Amazon VPC)") {
		return E("", Set("spotPriceHistorySet", nil)), nil
	}
	type price struct {
		it   *instanceType
		zone string
	}
	var all []price
	for _, it := range s.types {
		if len(names) > 0 && !slices.Contains(names, it.name) {
			continue
		}
		for _, z := range s.zones {
			if z.Name != f.Str("AvailabilityZone") && f.Str("AvailabilityZone") != "" {
				continue
			}
			if matchFilters(fs, func(name string) []string {
				switch name {
				case "instance-type":
					return []string{it.name}
				case "availability-zone":
					return []string{z.Name}
				case "product-description":
					return []string{"Linux/UNIX"}
				}
				return nil
			}) {
				all = append(all, price{it, z.Name})
			}
		}
	}
	all, next := page(f, all)
	var items []*el
	now := s.clock.Now().UTC().Format(time.RFC3339)
	for _, p := range all {
		items = append(items, E("", T("instanceType", p.it.name), T("availabilityZone", p.zone), T("productDescription", "Linux/UNIX"),
			T("spotPrice", strconv.FormatFloat(p.it.spotPrice(p.zone), 'f', 6, 64)), T("timestamp", now)))
	}
	return E("", Set("spotPriceHistorySet", items), Opt("nextToken", next)), nil
}

// data is the flat keys under prefix, without it.
func (f form) data(prefix string) map[string]string {
	out := map[string]string{}
	p := f.prefix + prefix + "."
	for k, v := range f.values {
		if rest, ok := strings.CutPrefix(k, p); ok {
			out[rest] = v[0]
		}
	}
	return out
}

// tagsFor reads the tags of TagSpecification.N entries for a resource type.
func (f form) tagsFor(resource string) map[string]string {
	tags := map[string]string{}
	for _, ts := range f.Each("TagSpecification") {
		if ts.Str("ResourceType") != resource {
			continue
		}
		for _, t := range ts.Each("Tag") {
			tags[t.Str("Key")] = t.Str("Value")
		}
	}
	return tags
}

func (lt *LaunchTemplate) xml() *el {
	return E("", T("launchTemplateId", lt.ID), T("launchTemplateName", lt.Name), T("createTime", lt.Created.UTC().Format(time.RFC3339)),
		T("defaultVersionNumber", "1"), T("latestVersionNumber", "1"), tagSet(lt.Tags))
}

func (s *Server) createLaunchTemplate(f form) (*el, *apiError) {
	name := f.Str("LaunchTemplateName")
	if name == "" {
		return nil, errorf("MissingParameter", "The request must contain the parameter LaunchTemplateName")
	}
	if s.templates[name] != nil {
		return nil, errorf("InvalidLaunchTemplateName.AlreadyExistsException", "Launch template name already in use.")
	}
	data := f.data("LaunchTemplateData")
	if data["ImageId"] == "" {
		return nil, errorf("InvalidParameterValue", "LaunchTemplateData.ImageId is required")
	}
	if s.images[data["ImageId"]] == nil {
		return nil, errorf("InvalidAMIID.NotFound", "The image id '[%s]' does not exist", data["ImageId"])
	}
	for k, v := range data {
		if strings.HasPrefix(k, "SecurityGroupId.") && s.groups[v] == nil {
			return nil, errorf("InvalidGroup.NotFound", "The security group '%s' does not exist", v)
		}
	}
	if p := data["IamInstanceProfile.Name"]; p != "" && s.profiles[p] == nil {
		return nil, errorf("InvalidParameterValue", "Value (%s) for parameter iamInstanceProfile.name is invalid. Invalid IAM Instance Profile name", p)
	}
	s.seq++
	lt := &LaunchTemplate{ID: fmt.Sprintf("lt-0%016d", s.seq), Name: name, Created: s.clock.Now(), Data: data, Tags: f.tagsFor("launch-template")}
	s.templates[name] = lt
	return E("", E("launchTemplate", lt.xml().kids...)), nil
}

func (s *Server) describeLaunchTemplates(f form) (*el, *apiError) {
	names, fs := f.List("LaunchTemplateName"), f.filters()
	for _, n := range names {
		if s.templates[n] == nil {
			return nil, errorf("InvalidLaunchTemplateName.NotFoundException", "At least one of the launch templates specified in the request does not exist.")
		}
	}
	var items []*el
	for _, n := range sortedKeys(s.templates) {
		lt := s.templates[n]
		if len(names) > 0 && !slices.Contains(names, n) {
			continue
		}
		if !matchFilters(fs, func(name string) []string {
			if v, ok := tagAttributes(lt.Tags, name); ok {
				return v
			}
			if name == "launch-template-name" {
				return []string{lt.Name}
			}
			return nil
		}) {
			continue
		}
		items = append(items, lt.xml())
	}
	return E("", Set("launchTemplates", items)), nil
}

func (s *Server) deleteLaunchTemplate(f form) (*el, *apiError) {
	name := f.Str("LaunchTemplateName")
	if name == "" {
		for n, lt := range s.templates {
			if lt.ID == f.Str("LaunchTemplateId") {
				name = n
			}
		}
	}
	lt := s.templates[name]
	if lt == nil {
		return nil, errorf("InvalidLaunchTemplateName.NotFoundException", "The specified launch template, with template name %s, does not exist.", name)
	}
	delete(s.templates, name)
	return E("", E("launchTemplate", lt.xml().kids...)), nil
}

// override is one CreateFleet candidate.
type override struct {
	template, instanceType, subnet string
	priority                       float64
	it                             *instanceType
	sn                             *Subnet
}

func (s *Server) createFleet(f form) (*el, *apiError) {
	if f.Str("Type") != "instant" {
		return nil, errorf("InvalidParameterValue", "only instant fleets are served here, not %q", f.Str("Type"))
	}
	token := f.Str("ClientToken")
	lifecycle := f.Str("TargetCapacitySpecification.DefaultTargetCapacityType")
	if lifecycle != "spot" && lifecycle != "on-demand" && lifecycle != "capacity-block" {
		return nil, errorf("InvalidParameterValue", "TargetCapacitySpecification.DefaultTargetCapacityType %q must be spot, on-demand or capacity-block", lifecycle)
	}
	if n := f.Str("TargetCapacitySpecification.TotalTargetCapacity"); n != "1" {
		return nil, errorf("InvalidParameterValue", "only a TotalTargetCapacity of 1 is served here, not %q", n)
	}
	if ids, ok := s.fleets[token]; ok && token != "" {
		// Idempotent retry: the same answer, no second purchase.
		return s.fleetResult(ids, lifecycle, nil), nil
	}
	var overrides []override
	for _, c := range f.Each("LaunchTemplateConfigs") {
		name := c.Str("LaunchTemplateSpecification.LaunchTemplateName")
		if name == "" {
			for n, lt := range s.templates {
				if lt.ID == c.Str("LaunchTemplateSpecification.LaunchTemplateId") {
					name = n
				}
			}
		}
		if s.templates[name] == nil {
			return nil, errorf("InvalidLaunchTemplateName.NotFoundException", "The specified launch template, with template name %s, does not exist.", name)
		}
		for _, o := range c.Each("Overrides") {
			ov := override{template: name, instanceType: o.Str("InstanceType"), subnet: o.Str("SubnetId")}
			ov.priority, _ = strconv.ParseFloat(o.Str("Priority"), 64)
			ov.sn = s.subnets[ov.subnet]
			if ov.sn == nil {
				return nil, errorf("InvalidSubnetID.NotFound", "The subnet ID '%s' does not exist", ov.subnet)
			}
			for _, it := range s.types {
				if it.name == ov.instanceType {
					ov.it = it
				}
			}
			if ov.it == nil {
				return nil, errorf("InvalidParameterValue", "The instance type '%s' does not exist", ov.instanceType)
			}
			overrides = append(overrides, ov)
		}
	}
	if len(overrides) == 0 {
		return nil, errorf("InvalidParameterValue", "LaunchTemplateConfigs must have at least one override")
	}
	price := func(o override) float64 {
		if lifecycle == "spot" {
			return o.it.spotPrice(o.sn.Zone)
		}
		return o.it.onDemand
	}
	strategy := f.Str("SpotOptions.AllocationStrategy")
	if lifecycle == "on-demand" {
		strategy = f.Str("OnDemandOptions.AllocationStrategy")
	}
	// lowest-price and price-capacity-optimized both pick the cheapest pool here (the fake has
	// no capacity signal beyond its insufficient-capacity set); prioritized honours priorities.
	sort.SliceStable(overrides, func(i, j int) bool {
		if strategy == "prioritized" && overrides[i].priority != overrides[j].priority {
			return overrides[i].priority < overrides[j].priority
		}
		return price(overrides[i]) < price(overrides[j])
	})
	var errs []*el
	for _, o := range overrides {
		reservation := s.templates[o.template].Data["CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId"]
		if block := lifecycle == "capacity-block"; block != (reservation != "" && s.reservations[reservation] != nil && s.reservations[reservation].Type == "capacity-block") {
			return nil, errorf("InvalidParameterCombination", "a capacity-block fleet must launch into a capacity block, and a capacity block only from one")
		}
		if reservation != "" {
			if code, msg := s.reservationRefusal(reservation, o.instanceType, o.sn.Zone); code != "" {
				errs = append(errs, E("", E("launchTemplateAndOverrides",
					E("launchTemplateSpecification", T("launchTemplateName", o.template), T("version", "$Latest")),
					E("overrides", T("instanceType", o.instanceType), T("subnetId", o.subnet), T("availabilityZone", o.sn.Zone))),
					T("lifecycle", lifecycle), T("errorCode", code), T("errorMessage", msg)))
				continue
			}
		}
		if s.noCapacity[capacityKey(o.instanceType, o.sn.Zone, lifecycle)] {
			errs = append(errs, E("", E("launchTemplateAndOverrides",
				E("launchTemplateSpecification", T("launchTemplateName", o.template), T("version", "$Latest")),
				E("overrides", T("instanceType", o.instanceType), T("subnetId", o.subnet), T("availabilityZone", o.sn.Zone))),
				T("lifecycle", lifecycle), T("errorCode", "InsufficientInstanceCapacity"),
				T("errorMessage", fmt.Sprintf("We currently do not have sufficient %s capacity in the Availability Zone you requested (%s).", o.instanceType, o.sn.Zone))))
			continue
		}
		s.seq++
		inst := &Instance{ID: newID("i-"), Type: o.instanceType, Zone: o.sn.Zone, ZoneID: o.sn.ZoneID, SubnetID: o.subnet,
			ImageID: s.templates[o.template].Data["ImageId"], Lifecycle: lifecycle, State: "pending", LaunchTime: s.clock.Now(),
			PrivateIP: fmt.Sprintf("10.0.%d.%d", s.seq/250, s.seq%250+1), Tags: f.tagsFor("instance"), LaunchTemplate: o.template,
			Template: maps.Clone(s.templates[o.template].Data), FleetToken: token, CapacityReservationID: reservation}
		inst.PrivateDNS = "ip-" + strings.ReplaceAll(inst.PrivateIP, ".", "-") + ".ec2.internal"
		s.instances[inst.ID] = inst
		if token != "" {
			s.fleets[token] = []string{inst.ID}
		}
		return s.fleetResult([]string{inst.ID}, lifecycle, errs), nil
	}
	return s.fleetResult(nil, lifecycle, errs), nil
}

func (s *Server) fleetResult(ids []string, lifecycle string, errs []*el) *el {
	var fleet []*el
	for _, id := range ids {
		inst := s.instances[id]
		fleet = append(fleet, E("", Set("instanceIds", []*el{T("", id)}), T("instanceType", inst.Type), T("lifecycle", lifecycle),
			E("launchTemplateAndOverrides", E("overrides", T("instanceType", inst.Type), T("subnetId", inst.SubnetID), T("availabilityZone", inst.Zone)))))
	}
	return E("", T("fleetId", newID("fleet-")), Set("errorSet", errs), Set("fleetInstanceSet", fleet))
}

func stateCode(state string) string {
	return map[string]string{"pending": "0", "running": "16", "shutting-down": "32", "terminated": "48", "stopping": "64", "stopped": "80"}[state]
}

func (inst *Instance) xml() *el {
	e := E("", T("instanceId", inst.ID), T("instanceType", inst.Type), T("imageId", inst.ImageID), T("subnetId", inst.SubnetID),
		E("placement", T("availabilityZone", inst.Zone), T("availabilityZoneId", inst.ZoneID), T("tenancy", "default")),
		E("instanceState", T("code", stateCode(inst.State)), T("name", inst.State)),
		T("launchTime", inst.LaunchTime.UTC().Format(time.RFC3339)), T("privateIpAddress", inst.PrivateIP),
		T("privateDnsName", inst.PrivateDNS), T("architecture", "x86_64"), tagSet(inst.Tags))
	var groups []*el
	for i := 1; inst.Template["SecurityGroupId."+strconv.Itoa(i)] != ""; i++ {
		groups = append(groups, E("", T("groupId", inst.Template["SecurityGroupId."+strconv.Itoa(i)])))
	}
	e.kids = append(e.kids, Set("groupSet", groups))
	if inst.Lifecycle == "spot" {
		e.kids = append(e.kids, T("instanceLifecycle", "spot"), T("spotInstanceRequestId", "sir-"+inst.ID[2:10]))
	}
	if inst.CapacityReservationID != "" {
		e.kids = append(e.kids, T("capacityReservationId", inst.CapacityReservationID))
	}
	if inst.Template["MetadataOptions.HttpTokens"] != "" {
		e.kids = append(e.kids, E("metadataOptions", T("httpTokens", inst.Template["MetadataOptions.HttpTokens"]),
			Opt("httpPutResponseHopLimit", inst.Template["MetadataOptions.HttpPutResponseHopLimit"]),
			Opt("httpEndpoint", inst.Template["MetadataOptions.HttpEndpoint"])))
	}
	return e
}

// terminatedVisibility is how long a terminated instance stays listed.
const terminatedVisibility = time.Hour

func (s *Server) describeInstances(f form) (*el, *apiError) {
	ids, fs := f.List("InstanceId"), f.filters()
	if err := knownFilters("DescribeInstances", fs, "instance-state-name", "instance-id", "instance-type", "availability-zone",
		"client-token", "capacity-reservation-id"); err != nil {
		return nil, err
	}
	for _, id := range ids {
		if s.instances[id] == nil {
			return nil, errorf("InvalidInstanceID.NotFound", "The instance ID '%s' does not exist", id)
		}
	}
	var sel []*Instance
	for _, id := range sortedKeys(s.instances) {
		inst := s.instances[id]
		if inst.State == "terminated" && s.clock.Since(inst.TerminatedAt) > terminatedVisibility {
			continue
		}
		if len(ids) > 0 && !slices.Contains(ids, id) {
			continue
		}
		if !matchFilters(fs, func(name string) []string {
			if v, ok := tagAttributes(inst.Tags, name); ok {
				return v
			}
			switch name {
			case "instance-state-name":
				return []string{inst.State}
			case "instance-id":
				return []string{inst.ID}
			case "instance-type":
				return []string{inst.Type}
			case "availability-zone":
				return []string{inst.Zone}
			case "client-token":
				return []string{inst.FleetToken}
			case "capacity-reservation-id":
				return []string{inst.CapacityReservationID}
			}
			return nil
		}) {
			continue
		}
		sel = append(sel, inst)
	}
	sel, next := page(f, sel)
	var res []*el
	for _, inst := range sel {
		res = append(res, E("", T("reservationId", "r-"+inst.ID[2:]), T("ownerId", s.account), Set("instancesSet", []*el{inst.xml()})))
	}
	return E("", Set("reservationSet", res), Opt("nextToken", next)), nil
}

// describeInstanceStatus reports running instances' status checks and scheduled events, as
// EC2 does by default (IncludeAllInstances false), filtered by instance-status.status,
// system-status.status and event.code.
func (s *Server) describeInstanceStatus(f form) (*el, *apiError) {
	fs := f.filters()
	var sel []*Instance
	for _, id := range sortedKeys(s.instances) {
		inst := s.instances[id]
		if inst.State != "running" {
			continue
		}
		if !matchFilters(fs, func(name string) []string {
			switch name {
			case "instance-status.status":
				return []string{statusOf(inst.Health.InstanceImpairedSince)}
			case "system-status.status":
				return []string{statusOf(inst.Health.SystemImpairedSince)}
			case "event.code":
				return inst.Health.Events
			case "instance-id":
				return []string{inst.ID}
			}
			return nil
		}) {
			continue
		}
		sel = append(sel, inst)
	}
	sel, next := page(f, sel)
	var items []*el
	for _, inst := range sel {
		check := func(name string, since time.Time) *el {
			detail := E("", T("name", "reachability"), T("status", "passed"))
			if !since.IsZero() {
				detail = E("", T("name", "reachability"), T("status", "failed"), T("impairedSince", since.UTC().Format(time.RFC3339)))
			}
			return E(name, T("status", statusOf(since)), Set("details", []*el{detail}))
		}
		var events []*el
		for _, code := range inst.Health.Events {
			events = append(events, E("", T("code", code), T("description", "scheduled "+code),
				T("notBefore", s.clock.Now().Add(24*time.Hour).UTC().Format(time.RFC3339))))
		}
		items = append(items, E("", T("instanceId", inst.ID), T("availabilityZone", inst.Zone),
			E("instanceState", T("code", "16"), T("name", "running")),
			check("instanceStatus", inst.Health.InstanceImpairedSince), check("systemStatus", inst.Health.SystemImpairedSince),
			Set("eventsSet", events)))
	}
	return E("", Set("instanceStatusSet", items), Opt("nextToken", next)), nil
}

// statusOf is a status check's summary: impaired since a time, else ok.
func statusOf(impairedSince time.Time) string {
	if impairedSince.IsZero() {
		return "ok"
	}
	return "impaired"
}

func (s *Server) terminateInstances(f form) (*el, *apiError) {
	ids := f.List("InstanceId")
	for _, id := range ids {
		if s.instances[id] == nil {
			return nil, errorf("InvalidInstanceID.NotFound", "The instance ID '%s' does not exist", id)
		}
	}
	var items []*el
	for _, id := range ids {
		inst := s.instances[id]
		prev := inst.State
		if inst.State != "terminated" {
			inst.State, inst.TerminatedAt = "shutting-down", s.clock.Now()
		}
		items = append(items, E("", T("instanceId", id),
			E("previousState", T("code", stateCode(prev)), T("name", prev)),
			E("currentState", T("code", stateCode(inst.State)), T("name", inst.State))))
	}
	return E("", Set("instancesSet", items)), nil
}

func (s *Server) createTags(f form) (*el, *apiError) {
	for _, id := range f.List("ResourceId") {
		inst := s.instances[id]
		if inst == nil {
			return nil, errorf("InvalidInstanceID.NotFound", "The instance ID '%s' does not exist", id)
		}
		for _, t := range f.Each("Tag") {
			inst.Tags[t.Str("Key")] = t.Str("Value")
		}
	}
	return E("", T("return", "true")), nil
}

// Advance moves instances along their lifecycle: pending → running after bootDelay,
// shutting-down → terminated after a few seconds. Call it from a loop (Kubelet does).
func (s *Server) Advance(bootDelay time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	for _, inst := range s.instances {
		switch {
		case inst.State == "pending" && now.Sub(inst.LaunchTime) >= bootDelay:
			inst.State = "running"
		case inst.State == "shutting-down" && now.Sub(inst.TerminatedAt) >= 2*time.Second:
			inst.State = "terminated"
		case (inst.State == "running" || inst.State == "pending") && !inst.ReclaimAt.IsZero() && !now.Before(inst.ReclaimAt):
			inst.State, inst.TerminatedAt = "shutting-down", now
		}
	}
}

// Terminate ends an instance as the cloud does on its own (a spot reclaim).
func (s *Server) Terminate(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	inst := s.instances[id]
	if inst == nil || inst.State == "terminated" {
		return false
	}
	inst.State, inst.TerminatedAt = "shutting-down", s.clock.Now()
	return true
}

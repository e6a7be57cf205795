"""ConsumerGroupDescribe (KIP-848): epochs, assignor and every member's current and target assignment.

Only consumer-protocol groups are described; a classic group answers GROUP_ID_NOT_FOUND (clients
then fall back to DescribeGroups), as Kafka does.
"""

from __future__ import annotations

from typing import Any

import kafka.errors as Errors

from strom.broker.handlers import denied_message
from strom.broker.request import RequestContext
from strom.coordinator.group.assignors import Assignment
from strom.coordinator.group.consumer_group import nest
from strom.protocol.api_keys import ApiKey
from strom.protocol.group_messages import ConsumerGroupDescribeResponse
from strom.security.acl import AclOperation, ResourceType

API_KEY = ApiKey.CONSUMER_GROUP_DESCRIBE
VERSIONS = (0, 1)
Described = ConsumerGroupDescribeResponse.DescribedGroup
Member = Described.Member
MemberAssignment = Member.Assignment
TopicPartitions = MemberAssignment.TopicPartitions
CLASSIC_MEMBER_TYPE, CONSUMER_MEMBER_TYPE = 0, 1  # v1 (KIP-1099): -1 unknown, 0 classic, 1 consumer


def _assignment(ctx: RequestContext, assignment: Assignment) -> Any:
    tps = []
    for topic, parts in sorted(assignment.items()):
        meta = ctx.metadata.topic(topic)
        if meta is not None and parts:
            tps.append(TopicPartitions(topic_id=meta.topic_id, topic_name=topic, partitions=sorted(parts)))
    return MemberAssignment(topic_partitions=tps)


def _failed(group_id: str, error: int, message: str | None) -> Any:
    return Described(error_code=error, error_message=message, group_id=group_id, group_state="", group_epoch=-1,
                     assignment_epoch=-1, assignor_name="", members=[], authorized_operations=None)


async def handle(ctx: RequestContext, request: Any) -> ConsumerGroupDescribeResponse:
    consumer_groups = ctx.group_coordinator.consumer_groups
    groups = []
    for group_id in request.group_ids or []:
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            groups.append(_failed(group_id, Errors.GroupAuthorizationFailedError.errno,
                                  denied_message(AclOperation.DESCRIBE, ResourceType.GROUP, group_id)))
            continue
        if consumer_groups is None:
            groups.append(_failed(group_id, Errors.GroupIdNotFoundError.errno, f"Group {group_id} not found."))
            continue
        error, message, cg = consumer_groups.describe(group_id)
        if cg is None:
            groups.append(_failed(group_id, error, message))
            continue
        members = [Member(
            member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
            client_id=m.client_id, client_host=m.client_host, subscribed_topic_names=list(m.subscribed_topic_names),
            subscribed_topic_regex=m.subscribed_topic_regex, assignment=_assignment(ctx, nest(m.assigned)),
            target_assignment=_assignment(ctx, cg.target.get(m.member_id, {})), member_type=CLASSIC_MEMBER_TYPE if m.uses_classic_protocol else CONSUMER_MEMBER_TYPE)
            for m in cg.members.values()]
        groups.append(Described(
            error_code=0, error_message=None, group_id=group_id, group_state=str(cg.state),
            group_epoch=cg.group_epoch, assignment_epoch=cg.target_assignment_epoch,
            assignor_name=consumer_groups.assignor_of(cg), members=members,
            authorized_operations=(ctx.authorized_operations(ResourceType.GROUP, group_id)
                                   if request.include_authorized_operations else None)))
    return ConsumerGroupDescribeResponse(throttle_time_ms=0, groups=groups)

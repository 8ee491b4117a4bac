// Package mqtt is the MQTT 3.1.1 backend (mqtt://, mqtts://) on
// github.com/eclipse/paho.mqtt.golang, over relay's shared driver layer,
// for brokers with shared subscriptions (Mosquitto 2 is tested).
// docs/mqtt.md is the reference; in short:
//
//   - A topic is an MQTT topic name (levels separated by '/', no
//     wildcards, no leading '$'); a group is the shared subscription
//     $share/GROUP/TOPIC.
//   - Each subscription is a persistent session (clean session off) of
//     its own, named [SessionID](group, instance, topic, n): instance=
//     (default the host name) names the process, n is the lowest number
//     no other subscription of the host holds (a flock'd file, since two
//     clients with one ID take the session from each other in turn). The
//     broker keeps the group's share of messages for the session while it
//     is away; a subscriber that comes back under the same ID gets them.
//     Provision creates the session ahead of the first Subscribe.
//   - Publishing is QoS 1, awaiting each PUBACK. Ack sends PUBACK. MQTT
//     has no negative acknowledgement: a Nack is emulated in process (the
//     subscription delivers the message again, Attempt counted here) and
//     sends no PUBACK, so that the broker, which redelivers only to the
//     session when it connects again, still holds the message if the
//     process dies first. NackAfter is held in process by the shared
//     layer. No dead-letter and no delayed delivery (refused).
//   - ID, Key and Metadata travel in an envelope at the head of the
//     payload (see Magic); a message that carries nothing but a payload
//     and its [DerivedID] goes as the plain payload, and a plain payload
//     from another client is delivered with that ID.
package mqtt

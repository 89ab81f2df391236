import java.io.FileOutputStream;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import org.apache.rocketmq.client.QueryResult;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.impl.MQAdminImpl;
import org.apache.rocketmq.common.message.MessageClientExt;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * What a broker serves from a store, as a client sees it (compiled with Workload.java, whose route wait and JSON
 * it uses). Per given queue: a "queue" line (min/max offset) and a "message" line per message pulled from min to
 * max with "*"; then a "tagged" line per tag those messages carry (the queue pulled again with the tag as the
 * subscription expression: the broker filters by the ConsumeQueue's tagsCode); then a "lookup" line per IndexFile
 * query: every KEYS token and every UNIQ_KEY of the messages of the workload's topics, and with tagIndex=true (5.5:
 * MQAdminImpl.queryMessage(cluster, topic, key, maxNum, begin, end, false, "T", null), the broker's
 * {@code topic#T#TAGS} key) every TAGS. System queues (SCHEDULE_TOPIC_XXXX, RMQ_SYS_*, rmq_sys_*) are pulled but
 * neither filtered nor looked up.
 *
 * <pre>
 * java Served namesrv=H:P brokerName=B out=served.jsonl queues=TOPIC/QID,... tagIndex=true lookupMax=1000
 * </pre>
 */
public class Served {
    static final int NO_MESSAGE = 208; // ResponseCode.NO_MESSAGE: a query that found nothing

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = new HashMap<>();
        for (String s : argv) {
            int i = s.indexOf('=');
            a.put(s.substring(0, i), s.substring(i + 1));
        }
        try (PrintWriter out = new PrintWriter(new OutputStreamWriter(new FileOutputStream(a.get("out")), StandardCharsets.UTF_8))) {
            new Served(a, out).dump();
        }
        System.exit(0);
    }

    final Map<String, String> args;
    final PrintWriter out;
    final DefaultMQPullConsumer consumer = new DefaultMQPullConsumer("wl-served");
    final int lookupMax;
    // lookup kind ("KEYS", "UNIQ_KEY", "TAGS") -> topic -> the keys to look up
    final Map<String, Map<String, TreeSet<String>>> lookups = new TreeMap<>();

    Served(Map<String, String> args, PrintWriter out) {
        this.args = args;
        this.out = out;
        this.lookupMax = Integer.parseInt(args.getOrDefault("lookupMax", "1000"));
    }

    void dump() throws Exception {
        consumer.setNamesrvAddr(args.get("namesrv"));
        consumer.start();
        String[] queues = args.get("queues").split(",");
        Workload.loadRoutes(consumer, queues);
        for (String q : queues) {
            int slash = q.lastIndexOf('/');
            MessageQueue mq = new MessageQueue(q.substring(0, slash), args.get("brokerName"), Integer.parseInt(q.substring(slash + 1)));
            queue(mq);
        }
        MQAdminImpl admin = consumer.getDefaultMQPullConsumerImpl().getRebalanceImpl().getmQClientFactory().getMQAdminImpl();
        for (var kind : lookups.entrySet()) {
            for (var topic : kind.getValue().entrySet()) {
                for (String key : topic.getValue()) {
                    lookup(admin, kind.getKey(), topic.getKey(), key);
                }
            }
        }
        out.flush();
        consumer.shutdown();
    }

    static boolean isSystem(String topic) {
        return topic.equals("SCHEDULE_TOPIC_XXXX") || topic.startsWith("RMQ_SYS_") || topic.startsWith("rmq_sys_");
    }

    /** The queue line, its messages, then one tagged line per tag; remembers what to look up. */
    void queue(MessageQueue mq) {
        Map<String, Object> head = new LinkedHashMap<>();
        head.put("kind", "queue");
        head.put("topic", mq.getTopic());
        head.put("queueId", mq.getQueueId());
        List<MessageExt> msgs;
        long min;
        long max;
        try {
            min = consumer.minOffset(mq);
            max = consumer.maxOffset(mq);
            head.put("minOffset", min);
            head.put("maxOffset", max);
            out.println(Workload.json(head));
            msgs = pullAll(mq, "*", min, max);
        } catch (Exception e) {
            head.put("error", String.valueOf(e).split("\n")[0]);
            out.println(Workload.json(head));
            return;
        }
        TreeSet<String> tags = new TreeSet<>();
        for (MessageExt m : msgs) {
            out.println(Workload.json(messageLine(mq, m)));
            if (!isSystem(mq.getTopic())) {
                remember(m);
                if (m.getTags() != null) {
                    tags.add(m.getTags());
                }
            }
        }
        for (String tag : tags) {
            tagged(mq, tag, min, max);
        }
    }

    void tagged(MessageQueue mq, String expression, long min, long max) {
        Map<String, Object> line = new LinkedHashMap<>();
        line.put("kind", "tagged");
        line.put("topic", mq.getTopic());
        line.put("queueId", mq.getQueueId());
        line.put("expression", expression);
        try {
            List<Object> offsets = new ArrayList<>();
            for (MessageExt m : pullAll(mq, expression, min, max)) {
                offsets.add(m.getQueueOffset());
            }
            line.put("queueOffsets", offsets);
        } catch (Exception e) {
            line.put("error", String.valueOf(e).split("\n")[0]);
        }
        out.println(Workload.json(line));
    }

    void remember(MessageExt m) {
        if (m.getKeys() != null) {
            for (String token : m.getKeys().split(" ")) {
                if (!token.isEmpty()) {
                    keysOf("KEYS", m.getTopic()).add(token);
                }
            }
        }
        if (m.getProperty("UNIQ_KEY") != null) {
            keysOf("UNIQ_KEY", m.getTopic()).add(m.getProperty("UNIQ_KEY"));
        }
        if (Boolean.parseBoolean(args.getOrDefault("tagIndex", "false")) && m.getTags() != null && !m.getTags().isEmpty()) {
            keysOf("TAGS", m.getTopic()).add(m.getTags());
        }
    }

    TreeSet<String> keysOf(String kind, String topic) {
        return lookups.computeIfAbsent(kind, k -> new TreeMap<>()).computeIfAbsent(topic, t -> new TreeSet<>());
    }

    /** One IndexFile query; "found" is the commitlog offsets of the messages the client accepts, ascending. */
    void lookup(MQAdminImpl admin, String kind, String topic, String key) throws InterruptedException {
        Map<String, Object> line = new LinkedHashMap<>();
        line.put("kind", "lookup");
        line.put("by", kind);
        line.put("topic", topic);
        line.put("key", key);
        try {
            TreeSet<Long> found = new TreeSet<>();
            for (MessageExt m : query(admin, kind, topic, key).getMessageList()) {
                found.add(m.getCommitLogOffset());
            }
            line.put("found", new ArrayList<>(found));
        } catch (MQClientException e) {
            if (e.getResponseCode() == NO_MESSAGE) {
                line.put("found", List.of());
            } else {
                line.put("error", String.valueOf(e).split("\n")[0]);
            }
        }
        out.println(Workload.json(line));
    }

    QueryResult query(MQAdminImpl admin, String kind, String topic, String key) throws MQClientException, InterruptedException {
        if (kind.equals("KEYS")) {
            return admin.queryMessage(topic, key, lookupMax, 0, Long.MAX_VALUE);
        }
        if (kind.equals("UNIQ_KEY")) {
            return admin.queryMessageByUniqKey(topic, key, lookupMax, 0, Long.MAX_VALUE);
        }
        try { // TAGS: 5.5 only, so by reflection (the 4.9.8 and 5.3.3 clients have no index type)
            Method m = MQAdminImpl.class.getMethod("queryMessage", String.class, String.class, String.class, int.class,
                    long.class, long.class, boolean.class, String.class, String.class);
            return (QueryResult) m.invoke(admin, null, topic, key, lookupMax, 0L, Long.MAX_VALUE, false, "T", null);
        } catch (InvocationTargetException e) {
            if (e.getCause() instanceof MQClientException) {
                throw (MQClientException) e.getCause();
            }
            throw new IllegalStateException(e.getCause());
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException(e);
        }
    }

    List<MessageExt> pullAll(MessageQueue mq, String expression, long min, long max) throws Exception {
        List<MessageExt> msgs = new ArrayList<>();
        long offset = min;
        while (offset < max) {
            PullResult res = consumer.pull(mq, expression, offset, 32);
            if (res.getPullStatus() == PullStatus.FOUND) {
                msgs.addAll(res.getMsgFoundList());
            }
            if (res.getNextBeginOffset() <= offset) {
                break;
            }
            offset = res.getNextBeginOffset();
        }
        return msgs;
    }

    static Map<String, Object> messageLine(MessageQueue mq, MessageExt m) {
        Map<String, Object> line = new LinkedHashMap<>();
        line.put("kind", "message");
        line.put("topic", mq.getTopic());
        line.put("queueId", mq.getQueueId());
        line.put("queueOffset", m.getQueueOffset());
        line.put("commitLogOffset", m.getCommitLogOffset());
        line.put("msgTopic", m.getTopic());
        line.put("msgQueueId", m.getQueueId());
        line.put("msgId", m.getMsgId());
        line.put("offsetMsgId", m instanceof MessageClientExt ? ((MessageClientExt) m).getOffsetMsgId() : null);
        line.put("keys", m.getKeys());
        line.put("tags", m.getTags());
        line.put("multiDispatch", m.getProperty("INNER_MULTI_DISPATCH"));
        line.put("multiQueueOffset", m.getProperty("INNER_MULTI_QUEUE_OFFSET"));
        return line;
    }
}

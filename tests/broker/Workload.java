import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.impl.MQClientAPIImpl;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageClientExt;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * The seeded workload the real RocketMQ client sends to the oracle broker (mode "send"), and the dump of
 * what a broker serves (mode "served"). One source compiles against the 4.9.8 and the 5.x clients: types
 * whose package moved between them are only used through {@code var}, and 5.x-only methods by reflection.
 *
 * <pre>
 * java Workload send   namesrv=H:P broker=H:P out=sent.jsonl seed=7 sends=1200 batchcq=true timer=true lmq=true
 * java Workload served namesrv=H:P broker=H:P brokerName=B out=served.jsonl queues=TOPIC/QID,...
 * </pre>
 */
public class Workload {
    static final String[] TAGS = {"TagA", "TagB", "TagC", "created", "paid||shipped", "标签", "🚀"};
    static final String[] TOPICS = {"TopicOrders", "TopicLogs", "TopicPayments", "TopicTx", "TopicBatchCQ"};
    static final long TX_SETTLE_MS = 12_000;

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = new HashMap<>();
        for (String s : argv) {
            int i = s.indexOf('=');
            if (i > 0) {
                a.put(s.substring(0, i), s.substring(i + 1));
            }
        }
        try (PrintWriter out = new PrintWriter(new OutputStreamWriter(new FileOutputStream(a.get("out")), StandardCharsets.UTF_8))) {
            if (argv[0].equals("send")) {
                new Workload(a, out).send();
            } else {
                served(a, out);
            }
        }
        System.exit(0);
    }

    final Map<String, String> args;
    final PrintWriter out;
    final Random rnd;
    final Map<Integer, Integer> txState = new ConcurrentHashMap<>();
    long lastDueMs;

    Workload(Map<String, String> args, PrintWriter out) {
        this.args = args;
        this.out = out;
        this.rnd = new Random(Long.parseLong(args.getOrDefault("seed", "7")));
    }

    void send() throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer("wl-producer");
        TransactionMQProducer txProducer = new TransactionMQProducer("wl-tx-producer");
        txProducer.setTransactionListener(new TransactionListener() {
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                return LocalTransactionState.values()[(Integer) arg % 3];
            }

            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                return LocalTransactionState.COMMIT_MESSAGE;
            }
        });
        for (DefaultMQProducer p : new DefaultMQProducer[] {producer, txProducer}) {
            p.setNamesrvAddr(args.get("namesrv"));
            p.setRetryTimesWhenSendFailed(0);
            p.setSendMsgTimeout(5000);
            p.start();
        }
        createTopics(producer.getDefaultMQProducerImpl().getMqClientFactory().getMQClientAPIImpl());
        int sends = Integer.parseInt(args.get("sends"));
        int failures = 0;
        long lastTxMs = 0;
        for (int n = 0; n < sends && failures < 3; n++) {
            int r = rnd.nextInt(1000);
            String kind = r < 800 ? "order" : r < 860 ? "log" : r < 905 ? "batch" : r < 950 ? "batchcq" : "tx";
            Map<String, Object> rec = new LinkedHashMap<>();
            rec.put("kind", kind);
            rec.put("n", n);
            try {
                if (kind.equals("order")) {
                    send(producer, rec, order(n, rec));
                } else if (kind.equals("log")) {
                    send(producer, rec, message("TopicLogs", "log", "LOG-" + n, 20 + rnd.nextInt(3000)));
                } else if (kind.equals("batch")) {
                    sendBatch(producer, rec, "TopicPayments", "pay", n, 2 + rnd.nextInt(6));
                } else if (kind.equals("batchcq")) {
                    sendBatch(producer, rec, "TopicBatchCQ", "bcq", n, 2 + rnd.nextInt(8));
                } else {
                    Message m = message("TopicTx", "tx", "TX-" + n, 100 + rnd.nextInt(400));
                    TransactionSendResult res = txProducer.sendMessageInTransaction(m, n);
                    rec.put("localState", String.valueOf(res.getLocalTransactionState()));
                    record(rec, res, List.of(m));
                    lastTxMs = System.currentTimeMillis();
                }
                failures = 0;
            } catch (Exception e) {
                failures++;
                rec.put("status", "EXCEPTION");
                rec.put("error", String.valueOf(e).split("\n")[0]);
                write(rec);
            }
        }
        long until = Math.max(lastDueMs + 5000, lastTxMs + TX_SETTLE_MS);
        while (failures == 0 && System.currentTimeMillis() < until) {
            Thread.sleep(200);
        }
        producer.shutdown();
        txProducer.shutdown();
    }

    /** Creates the topics on the broker itself (TopicBatchCQ with queue.type=BatchCQ on 5.x), then waits for their routes. */
    void createTopics(MQClientAPIImpl api) throws Exception {
        boolean batchCq = Boolean.parseBoolean(args.getOrDefault("batchcq", "false"));
        for (String topic : TOPICS) {
            TopicConfig tc = new TopicConfig(topic, topic.equals("TopicBatchCQ") ? 2 : 4, topic.equals("TopicBatchCQ") ? 2 : 4, 6);
            if (batchCq && topic.equals("TopicBatchCQ")) {
                Method m = TopicConfig.class.getMethod("setAttributes", Map.class);
                m.invoke(tc, Map.of("+queue.type", "BatchCQ"));
            }
            api.createTopic(args.get("broker"), "TBW102", tc, 5000);
        }
        long deadline = System.currentTimeMillis() + 60_000;
        for (String topic : TOPICS) {
            while (true) {
                try {
                    var route = api.getTopicRouteInfoFromNameServer(topic, 3000);
                    if (route != null && !route.getQueueDatas().isEmpty()) {
                        break;
                    }
                } catch (Exception e) {
                    if (System.currentTimeMillis() > deadline) {
                        throw e;
                    }
                }
                Thread.sleep(250);
            }
        }
    }

    /** TopicOrders: tags (10% none), several keys incl. non-ASCII and Java-hash collisions, delays, timers, LMQ (the
     * same draws whether or not the release has timers or LMQ). */
    Message order(int n, Map<String, Object> rec) throws Exception {
        String tags = rnd.nextInt(10) == 0 ? null : TAGS[rnd.nextInt(TAGS.length)];
        List<String> keys = new ArrayList<>();
        if (rnd.nextInt(100) < 85) {
            keys.add("ORD-" + n);
        }
        if (rnd.nextInt(100) < 30) {
            keys.add("USER-" + rnd.nextInt(50));
        }
        if (rnd.nextInt(100) < 5) {
            keys.add("客户-" + rnd.nextInt(10));
        }
        if (rnd.nextInt(100) < 2) {
            keys.add("HOT-KEY");
        }
        if (n % 97 == 0) {
            keys.add("coll-Aa");
        }
        if (n % 89 == 0) {
            keys.add("coll-BB");
        }
        int size = rnd.nextInt(50) == 0 ? 5000 + rnd.nextInt(5001) : 50 + rnd.nextInt(500);
        Message m = message("TopicOrders", tags, keys.isEmpty() ? null : String.join(" ", keys), size);
        int special = rnd.nextInt(100);
        if (special < 3) {
            int level = 1 + rnd.nextInt(3);
            m.setDelayTimeLevel(level);
            rec.put("delayLevel", level);
            lastDueMs = Math.max(lastDueMs, System.currentTimeMillis() + new int[] {0, 1000, 5000, 10000}[level]);
        }
        long due = System.currentTimeMillis() + 1000 + rnd.nextInt(9000);
        if (special >= 3 && special < 6 && Boolean.parseBoolean(args.getOrDefault("timer", "false"))) {
            Message.class.getMethod("setDeliverTimeMs", long.class).invoke(m, due);
            rec.put("deliverTimeMs", due);
            lastDueMs = Math.max(lastDueMs, due);
        }
        if (rnd.nextInt(10) == 0) {
            int a = rnd.nextInt(5);
            int b = (a + 1 + rnd.nextInt(4)) % 5;
            String lmq = "%LMQ%room-" + a + ",%LMQ%room-" + b;
            if (Boolean.parseBoolean(args.getOrDefault("lmq", "true"))) {
                MessageAccessor.putProperty(m, "INNER_MULTI_DISPATCH", lmq);
                rec.put("lmq", lmq);
            }
        }
        return m;
    }

    /** A message with a printable body of the given size (bodies over 4 KiB are compressed by the client). */
    Message message(String topic, String tags, String keys, int size) {
        StringBuilder body = new StringBuilder(size);
        while (body.length() < size) {
            body.append("body-").append(rnd.nextInt(1000)).append(' ');
        }
        Message m = new Message(topic, body.substring(0, size).getBytes(StandardCharsets.UTF_8));
        if (tags != null) {
            m.setTags(tags);
        }
        if (keys != null) {
            m.setKeys(keys);
        }
        return m;
    }

    void send(DefaultMQProducer producer, Map<String, Object> rec, Message m) throws Exception {
        record(rec, producer.send(m), List.of(m));
    }

    void sendBatch(DefaultMQProducer producer, Map<String, Object> rec, String topic, String tags, int n, int size)
            throws Exception {
        List<Message> batch = new ArrayList<>();
        for (int i = 0; i < size; i++) {
            String keys = topic.equals("TopicPayments") ? "PAY-" + n + "-" + i + " ORD-" + n : "BCQ-" + n + "-" + i;
            batch.add(message(topic, tags, keys, 30 + rnd.nextInt(300)));
        }
        record(rec, producer.send(batch), batch);
    }

    /** One sent.jsonl line: the client's SendResult, with the KEYS of each message and the TAGS as sent. */
    void record(Map<String, Object> rec, SendResult res, List<Message> msgs) {
        List<Object> keys = new ArrayList<>();
        for (Message m : msgs) {
            keys.add(m.getKeys());
        }
        Map<String, Object> line = new LinkedHashMap<>(rec);
        line.put("status", String.valueOf(res.getSendStatus()));
        line.put("msgId", res.getMsgId());
        line.put("topic", res.getMessageQueue().getTopic());
        line.put("queueId", res.getMessageQueue().getQueueId());
        line.put("queueOffset", res.getQueueOffset());
        line.put("messages", msgs.size());
        line.put("keys", keys);
        line.put("tags", msgs.get(0).getTags());
        write(line);
    }

    void write(Map<String, Object> line) {
        out.println(json(line));
        out.flush();
    }

    /** Mode "served": min/max queue offset of every given queue and every message the broker returns for it. */
    static void served(Map<String, String> a, PrintWriter out) throws Exception {
        DefaultMQPullConsumer consumer = new DefaultMQPullConsumer("wl-served");
        consumer.setNamesrvAddr(a.get("namesrv"));
        consumer.start();
        String[] queues = a.get("queues").split(",");
        loadRoutes(consumer, queues);
        for (String q : queues) {
            int slash = q.lastIndexOf('/');
            MessageQueue mq = new MessageQueue(q.substring(0, slash), a.get("brokerName"), Integer.parseInt(q.substring(slash + 1)));
            Map<String, Object> head = new LinkedHashMap<>();
            head.put("kind", "queue");
            head.put("topic", mq.getTopic());
            head.put("queueId", mq.getQueueId());
            try {
                long min = consumer.minOffset(mq);
                long max = consumer.maxOffset(mq);
                head.put("minOffset", min);
                head.put("maxOffset", max);
                out.println(json(head));
                pullAll(consumer, mq, min, max, out);
            } catch (Exception e) {
                head.put("error", String.valueOf(e).split("\n")[0]);
                out.println(json(head));
            }
        }
        out.flush();
        consumer.shutdown();
    }

    /**
     * Waits (at most 60 s; 5.3.3 registers ~10 s after boot) until a route of the queues' topics loads: LMQ queues
     * have no route of their own and are pulled through the broker address the others bring.
     */
    static void loadRoutes(DefaultMQPullConsumer consumer, String[] queues) throws Exception {
        var factory = consumer.getDefaultMQPullConsumerImpl().getRebalanceImpl().getmQClientFactory();
        long deadline = System.currentTimeMillis() + 60_000;
        while (true) {
            boolean routed = false;
            for (String q : queues) {
                String topic = q.substring(0, q.lastIndexOf('/'));
                routed |= !topic.startsWith("%LMQ%") && factory.updateTopicRouteInfoFromNameServer(topic);
            }
            if (routed) {
                return;
            }
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("no topic route after 60 s");
            }
            Thread.sleep(250);
        }
    }

    static void pullAll(DefaultMQPullConsumer consumer, MessageQueue mq, long min, long max, PrintWriter out) throws Exception {
        long offset = min;
        while (offset < max) {
            PullResult res = consumer.pull(mq, "*", offset, 32);
            if (res.getPullStatus() == PullStatus.FOUND) {
                for (MessageExt m : res.getMsgFoundList()) {
                    Map<String, Object> line = new LinkedHashMap<>();
                    line.put("kind", "message");
                    line.put("topic", mq.getTopic());
                    line.put("queueId", mq.getQueueId());
                    line.put("pullOffset", offset);
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
                    out.println(json(line));
                }
            }
            if (res.getNextBeginOffset() <= offset) {
                break;
            }
            offset = res.getNextBeginOffset();
        }
    }

    /** Minimal JSON: maps, lists, numbers, booleans, null and strings (UTF-8 output, control characters escaped). */
    static String json(Object v) {
        if (v == null) {
            return "null";
        }
        if (v instanceof Number || v instanceof Boolean) {
            return v.toString();
        }
        StringBuilder sb = new StringBuilder();
        if (v instanceof Map) {
            sb.append('{');
            for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
                sb.append(sb.length() > 1 ? "," : "").append(json(String.valueOf(e.getKey()))).append(':').append(json(e.getValue()));
            }
            return sb.append('}').toString();
        }
        if (v instanceof List) {
            sb.append('[');
            for (Object o : (List<?>) v) {
                sb.append(sb.length() > 1 ? "," : "").append(json(o));
            }
            return sb.append(']').toString();
        }
        sb.append('"');
        for (char c : v.toString().toCharArray()) {
            if (c == '"' || c == '\\') {
                sb.append('\\').append(c);
            } else if (c < 0x20) {
                sb.append(String.format("\\u%04x", (int) c));
            } else {
                sb.append(c);
            }
        }
        return sb.append('"').toString();
    }
}

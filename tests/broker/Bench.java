import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.rocketmq.client.impl.MQClientAPIImpl;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageDecoder;

/**
 * The bench store's sends (make bench): `messages` records of exactly `recordSize` bytes to one topic, each with a
 * tag, a UNIQ_KEY and two keys, sent asynchronously with at most `inflight` sends unanswered.
 * A record is 88 fixed bytes (body length included), the body, 1 + topic, 2 + properties; the properties are the message's own and
 * `brokerProps` bytes the broker adds (MSG_REGION, CLUSTER, TRACE_ON). Writes `sent=N` to `out` when every send
 * is acknowledged with SEND_OK; exits 1 on the first failure.
 *
 * <pre>
 * java Bench namesrv=H:P broker=H:P out=sent.txt messages=1500000 recordSize=723 brokerProps=69 queues=8
 * </pre>
 */
public class Bench {
    static final String TOPIC = "BenchTopic";
    static final int FIXED = 88;

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = new HashMap<>();
        for (String s : argv) {
            int i = s.indexOf('=');
            a.put(s.substring(0, i), s.substring(i + 1));
        }
        DefaultMQProducer producer = new DefaultMQProducer("bench-producer");
        producer.setNamesrvAddr(a.get("namesrv"));
        producer.setSendMsgTimeout(30_000);
        producer.start();
        createTopic(producer, a.get("broker"), Integer.parseInt(a.get("queues")));
        int sent = send(producer, a);
        producer.shutdown();
        try (PrintWriter out = new PrintWriter(a.get("out"), StandardCharsets.UTF_8)) {
            out.println("sent=" + sent);
        }
        System.exit(0);
    }

    static void createTopic(DefaultMQProducer producer, String broker, int queues) throws Exception {
        MQClientAPIImpl api = producer.getDefaultMQProducerImpl().getMqClientFactory().getMQClientAPIImpl();
        api.createTopic(broker, "TBW102", new TopicConfig(TOPIC, queues, queues, 6), 5000);
        long deadline = System.currentTimeMillis() + 60_000;
        while (true) {
            try {
                var route = api.getTopicRouteInfoFromNameServer(TOPIC, 3000);
                if (route != null && !route.getQueueDatas().isEmpty()) {
                    return;
                }
            } catch (Exception e) {
                if (System.currentTimeMillis() > deadline) {
                    throw e;
                }
            }
            Thread.sleep(250);
        }
    }

    static int send(DefaultMQProducer producer, Map<String, String> a) throws Exception {
        int messages = Integer.parseInt(a.get("messages"));
        int recordSize = Integer.parseInt(a.get("recordSize"));
        int brokerProps = Integer.parseInt(a.get("brokerProps"));
        int inflight = Integer.parseInt(a.getOrDefault("inflight", "512"));
        Semaphore room = new Semaphore(inflight);
        AtomicInteger ok = new AtomicInteger();
        AtomicReference<String> failure = new AtomicReference<>();
        SendCallback callback = new SendCallback() {
            public void onSuccess(SendResult result) {
                if (result.getSendStatus() == SendStatus.SEND_OK) {
                    ok.incrementAndGet();
                } else {
                    failure.compareAndSet(null, String.valueOf(result.getSendStatus()));
                }
                room.release();
            }

            public void onException(Throwable e) {
                failure.compareAndSet(null, String.valueOf(e));
                room.release();
            }
        };
        for (int n = 0; n < messages && failure.get() == null; n++) {
            room.acquire();
            producer.send(message(n, recordSize, brokerProps), callback);
        }
        room.acquire(inflight);
        if (failure.get() != null) {
            System.err.println("send failed: " + failure.get());
            System.exit(1);
        }
        return ok.get();
    }

    /** A message whose record will be `recordSize` bytes: the body fills what the rest leaves. */
    static Message message(int n, int recordSize, int brokerProps) {
        Message m = new Message(TOPIC, "TagA", String.format("ORD-%08d USER-%08d", n, n % 100_000), new byte[0]);
        MessageClientIDSetter.setUniqID(m);
        int props = MessageDecoder.messageProperties2String(m.getProperties()).getBytes(StandardCharsets.UTF_8).length;
        int rest = FIXED + 1 + TOPIC.length() + 2 + props + brokerProps;
        byte[] body = new byte[recordSize - rest];
        Arrays.fill(body, (byte) ('a' + n % 26));
        m.setBody(body);
        return m;
    }
}

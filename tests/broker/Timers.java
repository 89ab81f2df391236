import java.io.FileOutputStream;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.impl.MQClientAPIImpl;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * Timers and delay levels still pending when the broker stops (the harness's "timers" variant), and what a broker
 * delivers of them later.
 *
 * <pre>
 * java Timers send  namesrv=H:P out=sent.jsonl seed=7 pending=24 short=120 pendingMs=25000
 * java Timers watch namesrv=H:P brokerName=B out=delivered.jsonl topics=TopicTimers,TopicDelays expect=N waitMs=90000
 * </pre>
 *
 * send: first the pending ones (timers due pendingMs..2*pendingMs after their send, delay level 4 = 30 s), then
 * many short ones (timers 1-3 s ahead, delay level 1 = 1 s), whose timerlog units push the pending ones' units out of
 * the broker's recovery window; then waits until the short ones are due and 3 s more, and returns (the harness stops
 * the broker with SIGTERM). watch: pulls every queue of the topics from 0 to its max until {@code expect} messages
 * are there (or waitMs passed), then writes each message with its store time and timer properties.
 */
public class Timers {
    public static void main(String[] argv) throws Exception {
        Map<String, String> a = new HashMap<>();
        for (String s : argv) {
            int i = s.indexOf('=');
            if (i > 0) {
                a.put(s.substring(0, i), s.substring(i + 1));
            }
        }
        int code = 0;
        try (PrintWriter out = new PrintWriter(new OutputStreamWriter(new FileOutputStream(a.get("out")), StandardCharsets.UTF_8))) {
            if (java.util.Arrays.asList(argv).contains("send")) {
                send(a, out);
            } else {
                watch(a, out);
            }
        } catch (Exception e) {
            e.printStackTrace();
            code = 1;
        }
        System.exit(code); // the client's threads would keep the JVM alive after an exception
    }

    static void send(Map<String, String> a, PrintWriter out) throws Exception {
        Random rnd = new Random(Long.parseLong(a.getOrDefault("seed", "7")));
        DefaultMQProducer producer = new DefaultMQProducer("timers-producer");
        producer.setNamesrvAddr(a.get("namesrv"));
        producer.setSendMsgTimeout(5000);
        producer.start();
        createTopics(producer.getDefaultMQProducerImpl().getMqClientFactory().getMQClientAPIImpl(), a.get("broker"));
        int pending = Integer.parseInt(a.getOrDefault("pending", "24"));
        int shortOnes = Integer.parseInt(a.getOrDefault("short", "120"));
        long pendingMs = Long.parseLong(a.getOrDefault("pendingMs", "25000"));
        long lastShort = 0;
        for (int n = 0; n < pending + shortOnes; n++) {
            boolean isPending = n < pending;
            boolean delay = n % 4 == 3;
            Message m = new Message(delay ? "TopicDelays" : "TopicTimers", isPending ? "pending" : "short",
                    (isPending ? "PEND-" : "SHORT-") + n, ("timer body " + n).getBytes(StandardCharsets.UTF_8));
            Map<String, Object> rec = new LinkedHashMap<>();
            rec.put("kind", (delay ? "delay-" : "timer-") + (isPending ? "pending" : "short"));
            rec.put("n", n);
            if (delay) {
                int level = isPending ? 4 : 1;
                m.setDelayTimeLevel(level);
                rec.put("delayLevel", level);
            } else {
                long due = System.currentTimeMillis() + (isPending ? pendingMs + rnd.nextInt((int) pendingMs) : 1000 + rnd.nextInt(2000));
                Message.class.getMethod("setDeliverTimeMs", long.class).invoke(m, due);
                rec.put("deliverTimeMs", due);
                if (!isPending) {
                    lastShort = Math.max(lastShort, due);
                }
            }
            SendResult res = producer.send(m);
            rec.put("status", String.valueOf(res.getSendStatus()));
            rec.put("msgId", res.getMsgId());
            rec.put("topic", m.getTopic());
            rec.put("queueId", res.getMessageQueue().getQueueId());
            rec.put("keys", m.getKeys());
            rec.put("sentMs", System.currentTimeMillis());
            out.println(Workload.json(rec));
            out.flush();
        }
        long until = Math.max(lastShort, System.currentTimeMillis() + 1000) + 3000;
        while (System.currentTimeMillis() < until) {
            Thread.sleep(200);
        }
        producer.shutdown();
    }

    /** TopicTimers and TopicDelays, 4 queues each, created on the broker; then their routes waited for. */
    static void createTopics(MQClientAPIImpl api, String broker) throws Exception {
        String[] topics = {"TopicTimers", "TopicDelays"};
        for (String topic : topics) {
            api.createTopic(broker, "TBW102", new TopicConfig(topic, 4, 4, 6), 5000);
        }
        long deadline = System.currentTimeMillis() + 60_000;
        for (String topic : topics) {
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

    static void watch(Map<String, String> a, PrintWriter out) throws Exception {
        DefaultMQPullConsumer consumer = new DefaultMQPullConsumer("timers-watch");
        consumer.setNamesrvAddr(a.get("namesrv"));
        consumer.start();
        String[] topics = a.get("topics").split(",");
        int expect = Integer.parseInt(a.get("expect"));
        long deadline = System.currentTimeMillis() + Long.parseLong(a.getOrDefault("waitMs", "90000"));
        List<String> queues = new ArrayList<>();
        for (String t : topics) {
            for (int q = 0; q < 4; q++) {
                queues.add(t + "/" + q);
            }
        }
        while (true) { // a loaded name server answers late: try again until the deadline
            try {
                Workload.loadRoutes(consumer, queues.toArray(new String[0]));
                break;
            } catch (Exception e) {
                if (System.currentTimeMillis() > deadline) {
                    throw e;
                }
                Thread.sleep(1000);
            }
        }
        List<Map<String, Object>> lines = new ArrayList<>();
        while (true) {
            lines.clear();
            for (String q : queues) {
                int slash = q.lastIndexOf('/');
                MessageQueue mq = new MessageQueue(q.substring(0, slash), a.get("brokerName"), Integer.parseInt(q.substring(slash + 1)));
                long max;
                try {
                    max = consumer.maxOffset(mq);
                } catch (Exception e) {
                    continue;
                }
                long offset = 0;
                while (offset < max && System.currentTimeMillis() < deadline + 10_000) {
                    PullResult res = consumer.pull(mq, "*", offset, 32, 3000);
                    if (res.getPullStatus() == PullStatus.FOUND) {
                        for (MessageExt m : res.getMsgFoundList()) {
                            lines.add(line(mq, m));
                        }
                    }
                    if (res.getNextBeginOffset() <= offset) {
                        break;
                    }
                    offset = res.getNextBeginOffset();
                }
            }
            System.out.println("watch: " + lines.size() + " of " + expect);
            if (lines.size() >= expect || System.currentTimeMillis() > deadline) {
                break;
            }
            Thread.sleep(1000);
        }
        for (Map<String, Object> l : lines) {
            out.println(Workload.json(l));
        }
        out.flush();
        consumer.shutdown();
    }

    static Map<String, Object> line(MessageQueue mq, MessageExt m) {
        Map<String, Object> line = new LinkedHashMap<>();
        line.put("topic", mq.getTopic());
        line.put("queueId", mq.getQueueId());
        line.put("queueOffset", m.getQueueOffset());
        line.put("commitLogOffset", m.getCommitLogOffset());
        line.put("msgId", m.getMsgId());
        line.put("keys", m.getKeys());
        line.put("storeTimestamp", m.getStoreTimestamp());
        line.put("timerOutMs", m.getProperty("TIMER_OUT_MS"));
        line.put("timerDequeueMs", m.getProperty("TIMER_DEQUEUE_MS"));
        line.put("realTopic", m.getProperty("REAL_TOPIC"));
        line.put("realQid", m.getProperty("REAL_QID"));
        return line;
    }
}

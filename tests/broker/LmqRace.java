import java.io.FileOutputStream;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * LMQ messages sent at once from several threads, each to its own queue of TopicRace, all naming the same LMQ
 * queues (the harness's "lmq-race" variant): appends of different source queues race for the LMQ offsets, so a
 * record's INNER_MULTI_QUEUE_OFFSET may repeat another's or leave one out, as the broker gives them.
 *
 * <pre>
 * java LmqRace namesrv=H:P broker=H:P brokerName=B out=sent.jsonl threads=8 each=40
 * </pre>
 */
public class LmqRace {
    static final String TOPIC = "TopicRace";
    static final String LMQ = "%LMQ%race-0,%LMQ%race-1";

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
            send(a, out);
        } catch (Exception e) {
            e.printStackTrace();
            code = 1;
        }
        System.exit(code); // the client's threads would keep the JVM alive after an exception
    }

    static void send(Map<String, String> a, PrintWriter out) throws Exception {
        int threads = Integer.parseInt(a.getOrDefault("threads", "8"));
        int each = Integer.parseInt(a.getOrDefault("each", "40"));
        DefaultMQProducer producer = new DefaultMQProducer("lmq-race-producer");
        producer.setNamesrvAddr(a.get("namesrv"));
        producer.setSendMsgTimeout(10000);
        producer.start();
        var api = producer.getDefaultMQProducerImpl().getMqClientFactory().getMQClientAPIImpl();
        api.createTopic(a.get("broker"), "TBW102", new TopicConfig(TOPIC, threads, threads, 6), 5000);
        long deadline = System.currentTimeMillis() + 60_000;
        while (true) {
            try {
                var route = api.getTopicRouteInfoFromNameServer(TOPIC, 3000);
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
        producer.send(new Message(TOPIC, "warm", "warm".getBytes(StandardCharsets.UTF_8)),
                new MessageQueue(TOPIC, a.get("brokerName"), 0)); // the route is loaded before the race
        CountDownLatch go = new CountDownLatch(1);
        List<Thread> started = new ArrayList<>();
        List<String> lines = java.util.Collections.synchronizedList(new ArrayList<>());
        List<Exception> failed = java.util.Collections.synchronizedList(new ArrayList<>());
        for (int t = 0; t < threads; t++) {
            MessageQueue mq = new MessageQueue(TOPIC, a.get("brokerName"), t);
            int thread = t;
            Thread th = new Thread(() -> {
                try {
                    go.await();
                    for (int n = 0; n < each; n++) {
                        Message m = new Message(TOPIC, "race", "RACE-" + thread + "-" + n,
                                ("race body " + thread + " " + n).getBytes(StandardCharsets.UTF_8));
                        MessageAccessor.putProperty(m, "INNER_MULTI_DISPATCH", LMQ);
                        SendResult res = producer.send(m, mq);
                        Map<String, Object> rec = new LinkedHashMap<>();
                        rec.put("topic", TOPIC);
                        rec.put("queueId", mq.getQueueId());
                        rec.put("keys", m.getKeys());
                        rec.put("lmq", LMQ);
                        rec.put("status", String.valueOf(res.getSendStatus()));
                        rec.put("msgId", res.getMsgId());
                        lines.add(Workload.json(rec));
                    }
                } catch (Exception e) {
                    failed.add(e);
                }
            });
            th.start();
            started.add(th);
        }
        go.countDown();
        for (Thread th : started) {
            th.join();
        }
        if (!failed.isEmpty()) {
            throw failed.get(0);
        }
        for (String line : lines) {
            out.println(line);
        }
        producer.shutdown();
    }
}

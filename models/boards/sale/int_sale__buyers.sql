{#- Per buyer: spend in cents, units and orders (exact, one copy per event_id). -#}

select
    buyer_id,
    sum(toInt128(amount_cents)) as spend_cents,
    sum(toInt128(units)) as units,
    count() as orders
from {{ ref('stg_toplist__orders') }}
group by buyer_id
